// kvplan: measure the caches llama.cpp allocates (scripts/llamacpp_golden.py builds and runs this).
//
// Usage:
//   llamacpp_harness run  META.gguf CASES.tsv   one JSON line per case on stdout ("RESULT {...}")
//   llamacpp_harness save META.gguf OUT.gguf    write a loadable GGUF (weights zero) of META's model
//
// META.gguf holds metadata only (written by the gguf Python package); the model's tensors are made by
// llama.cpp itself from its architecture code (llama_model_init_from_user), all zero, so no weights
// are needed to create contexts. Each CASES.tsv line:
//   id n_ctx n_seq_max type_k type_v flash_attn(on|off|auto) n_batch n_ubatch kv_unified(0|1) swa_full(0|1)
// With KVPLAN_NO_ALLOC set the model and context are sized without allocating (llama_model_params.no_alloc),
// which lets real-size geometries be measured. Before a case "BEGIN id" is printed and flushed: a case that aborts the process (a GGML_ASSERT) is
// seen by the caller as a BEGIN without its RESULT.
//
// The exact bytes come from the cache objects themselves: llama.cpp's src/ headers are included with
// their private members opened, which is the only way to read per-cache K and V bytes exactly (the log
// prints MiB with two decimals). Only reads are done.

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#define private public
#define protected public
#include "llama-context.h"
#include "llama-ext.h"
#include "llama-kv-cache.h"
#include "llama-kv-cache-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-recurrent.h"
#undef private
#undef protected

static std::string g_log;  // WARN and ERROR lines of the current case

static void log_cb(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        g_log += text;
    }
    if (getenv("KVPLAN_HARNESS_VERBOSE")) {
        fputs(text, stderr);
    }
}

static std::string jstr(const std::string & s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"':  out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            default:
                if ((unsigned char) c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

static void zero_tensor(ggml_tensor * t, void *) {
    ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
}

static llama_model * load_meta(const char * path) {
    gguf_init_params gp = { /*no_alloc =*/ true, /*ctx =*/ nullptr };
    gguf_context * meta = gguf_init_from_file(path, gp);
    if (!meta) {
        fprintf(stderr, "cannot read %s\n", path);
        return nullptr;
    }
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    // KVPLAN_NO_ALLOC=1: llama.cpp's own dry run (what llama-fit-params uses): tensors and caches are sized,
    // nothing is allocated, the compute buffer is the size the scheduler would allocate
    mp.no_alloc = getenv("KVPLAN_NO_ALLOC") != nullptr;
    llama_model * model = llama_model_init_from_user(meta, zero_tensor, nullptr, mp);
    // the model keeps what it needs from the metadata
    return model;
}

static ggml_type type_from_name(const std::string & s) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && s == n) {
            return (ggml_type) t;
        }
    }
    fprintf(stderr, "unknown type %s\n", s.c_str());
    exit(2);
}

static size_t bytes_of(const std::map<ggml_backend_buffer_type_t, size_t> & m) {
    size_t s = 0;
    for (const auto & [b, n] : m) {
        s += n;
    }
    return s;
}

static std::string kv_json(const char * name, const llama_kv_cache * kv) {
    std::ostringstream o;
    size_t kb = 0, vb = 0;
    std::ostringstream layers;
    layers << "[";
    bool first = true;
    std::string tk, tv;
    for (const auto & l : kv->layers) {
        kb += ggml_nbytes(l.k);
        vb += l.v ? ggml_nbytes(l.v) : 0;
        tk = ggml_type_name(l.k->type);
        if (l.v) {
            tv = ggml_type_name(l.v->type);
        }
        if (!first) {
            layers << ",";
        }
        first = false;
        // [model layer, K row elements, V row elements (-1: no V), cells, streams]
        layers << "[" << l.il << "," << l.k->ne[0] << "," << (l.v ? l.v->ne[0] : -1) << "," << l.k->ne[1] << ","
               << l.k->ne[2] << "]";
    }
    layers << "]";
    o << "{\"name\":" << jstr(name) << ",\"cells\":" << kv->get_size() << ",\"n_stream\":" << kv->n_stream
      << ",\"n_seq_max\":" << kv->n_seq_max << ",\"n_layers\":" << kv->layers.size()
      << ",\"v_trans\":" << (kv->v_trans ? "true" : "false") << ",\"n_swa\":" << kv->n_swa
      << ",\"type_k\":" << jstr(tk) << ",\"type_v\":" << jstr(tv) << ",\"k_bytes\":" << kb << ",\"v_bytes\":" << vb
      << ",\"buffer_bytes\":" << bytes_of(kv->memory_breakdown()) << ",\"layers\":" << layers.str() << "}";
    return o.str();
}

static std::string recr_json(const llama_memory_recurrent * rs) {
    std::ostringstream o;
    size_t rb = 0, sb = 0, pb = 0;
    int n = 0;
    int64_t rw = -1, sw = -1;
    std::string tr, ts;
    for (size_t i = 0; i < rs->r_l.size(); ++i) {
        if (!rs->r_l[i]) {
            continue;
        }
        ++n;
        rb += ggml_nbytes(rs->r_l[i]);
        sb += ggml_nbytes(rs->s_l[i]);
        if (i < rs->p_l.size() && rs->p_l[i]) {
            pb += ggml_nbytes(rs->p_l[i]);
        }
        rw = rs->r_l[i]->ne[0];
        sw = rs->s_l[i]->ne[0];
        tr = ggml_type_name(rs->r_l[i]->type);
        ts = ggml_type_name(rs->s_l[i]->type);
    }
    o << "{\"cells\":" << rs->size << ",\"n_seq_max\":" << rs->n_seq_max << ",\"n_rs_seq\":" << rs->n_rs_seq
      << ",\"n_layers\":" << n << ",\"type_r\":" << jstr(tr) << ",\"type_s\":" << jstr(ts) << ",\"r_row\":" << rw
      << ",\"s_row\":" << sw << ",\"r_bytes\":" << rb << ",\"s_bytes\":" << sb << ",\"p_bytes\":" << pb
      << ",\"buffer_bytes\":" << bytes_of(rs->memory_breakdown()) << "}";
    return o.str();
}

static void run_case(llama_model * model, const std::vector<std::string> & f) {
    const std::string & id = f[0];
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx        = (uint32_t) std::stoul(f[1]);
    cp.n_seq_max    = (uint32_t) std::stoul(f[2]);
    cp.type_k       = type_from_name(f[3]);
    cp.type_v       = type_from_name(f[4]);
    cp.flash_attn_type = f[5] == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : f[5] == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.n_batch      = (uint32_t) std::stoul(f[6]);
    cp.n_ubatch     = (uint32_t) std::stoul(f[7]);
    cp.kv_unified   = f[8] == "1";
    cp.swa_full     = f[9] == "1";
    cp.n_threads    = 1;
    cp.n_threads_batch = 1;
    cp.no_perf      = true;

    printf("BEGIN %s\n", id.c_str());
    fflush(stdout);
    g_log.clear();

    llama_context * ctx = llama_init_from_model(model, cp);
    std::ostringstream o;
    o << "RESULT {\"id\":" << jstr(id);
    if (!ctx) {
        o << ",\"ok\":false,\"log\":" << jstr(g_log) << "}";
        printf("%s\n", o.str().c_str());
        fflush(stdout);
        return;
    }
    const llama_cparams & c = ctx->get_cparams();
    o << ",\"ok\":true,\"n_ctx\":" << c.n_ctx << ",\"n_ctx_seq\":" << c.n_ctx_seq << ",\"n_batch\":" << c.n_batch
      << ",\"n_ubatch\":" << c.n_ubatch << ",\"n_seq_max\":" << c.n_seq_max << ",\"n_rs_seq\":" << c.n_rs_seq
      << ",\"flash_attn\":" << (c.flash_attn ? "true" : "false") << ",\"kv_unified\":" << (c.kv_unified ? "true" : "false");

    llama_memory_i * mem = ctx->memory.get();
    std::vector<std::string> caches;
    std::string recr = "null";
    const char * kind = "none";
    if (auto * hi = dynamic_cast<llama_memory_hybrid_iswa *>(mem)) {
        kind = "hybrid_iswa";
        caches.push_back(kv_json("base", hi->get_mem_attn()->get_base()));
        caches.push_back(kv_json("swa", hi->get_mem_attn()->get_swa()));
        recr = recr_json(hi->get_mem_recr());
    } else if (auto * h = dynamic_cast<llama_memory_hybrid *>(mem)) {
        kind = "hybrid";
        caches.push_back(kv_json("attn", h->get_mem_attn()));
        recr = recr_json(h->get_mem_recr());
    } else if (auto * is = dynamic_cast<llama_kv_cache_iswa *>(mem)) {
        kind = "iswa";
        caches.push_back(kv_json("base", is->get_base()));
        caches.push_back(kv_json("swa", is->get_swa()));
    } else if (auto * kv = dynamic_cast<llama_kv_cache *>(mem)) {
        kind = "kv";
        caches.push_back(kv_json("kv", kv));
    } else if (auto * rs = dynamic_cast<llama_memory_recurrent *>(mem)) {
        kind = "recurrent";
        recr = recr_json(rs);
    } else if (mem) {
        kind = "other";
    }
    o << ",\"memory\":" << jstr(kind) << ",\"caches\":[";
    for (size_t i = 0; i < caches.size(); ++i) {
        o << (i ? "," : "") << caches[i];
    }
    o << "],\"recurrent\":" << recr;

    size_t compute = 0, model_b = 0, context_b = 0;
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        compute += mb.compute;
        model_b += mb.model;
        context_b += mb.context;
    }
    const size_t output = ctx->buf_output ? ggml_backend_buffer_get_size(ctx->buf_output.get()) : 0;
    o << ",\"compute_bytes\":" << compute << ",\"memory_bytes\":" << context_b << ",\"output_bytes\":" << output
      << ",\"model_bytes\":" << model_b << ",\"log\":" << jstr(g_log) << "}";
    printf("%s\n", o.str().c_str());
    fflush(stdout);
    llama_free(ctx);
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s run META.gguf CASES.tsv | save META.gguf OUT.gguf\n", argv[0]);
        return 2;
    }
    llama_log_set(log_cb, nullptr);
    llama_backend_init();
    llama_model * model = load_meta(argv[2]);
    if (!model) {
        printf("LOADFAIL %s\n", jstr(g_log).c_str());
        return 3;
    }
    if (strcmp(argv[1], "save") == 0) {
        llama_model_save_to_file(model, argv[3]);
        llama_model_free(model);
        return 0;
    }
    FILE * fin = fopen(argv[3], "r");
    if (!fin) {
        fprintf(stderr, "cannot read %s\n", argv[3]);
        return 2;
    }
    char line[4096];
    while (fgets(line, sizeof line, fin)) {
        std::istringstream is(line);
        std::vector<std::string> f;
        std::string w;
        while (is >> w) {
            f.push_back(w);
        }
        if (f.empty() || f[0][0] == '#') {
            continue;
        }
        if (f.size() != 10) {
            fprintf(stderr, "bad case line: %s", line);
            return 2;
        }
        run_case(model, f);
    }
    fclose(fin);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
