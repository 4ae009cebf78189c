/*
 * Test driver for hipdnn_plugin_sdk/GraphReader.h (C99; also compiles as C++17).
 *
 *   reader_driver FILE [dump]
 *
 * FILE holds records: a little-endian uint32 length, then that many bytes. Each
 * record is copied into a heap block of exactly its size (so AddressSanitizer
 * catches any read past it) and opened with the reader; when that succeeds
 * every accessor is walked, including out-of-range indices and decoding nodes
 * as the wrong kind, and the reader's answers are checked for consistency
 * (abort() on any disagreement). With `dump`, one JSON line per record gives the
 * reader's view; otherwise one summary line is printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hipdnn_plugin_sdk/GraphReader.h"

#define CHECK(cond)                                                                                                    \
    do                                                                                                                 \
    {                                                                                                                  \
        if(!(cond))                                                                                                    \
        {                                                                                                              \
            fprintf(stderr, "reader_driver: check failed at line %d: %s\n", __LINE__, #cond);                          \
            abort();                                                                                                   \
        }                                                                                                              \
    } while(0)

static FILE* out_;
static int dump_;

static void emit(const char* fmt, ...) HIPDNN_PLUGIN_SDK_PRINTF_LIKE(1, 2);
static void emit(const char* fmt, ...)
{
    va_list ap;
    if(!dump_)
        return;
    va_start(ap, fmt);
    vfprintf(out_, fmt, ap);
    va_end(ap);
}

static void emit_hex(const char* s, uint32_t n)
{
    uint32_t i;
    emit("\"");
    for(i = 0; i < n; ++i)
        emit("%02x", (unsigned)(unsigned char)s[i]);
    emit("\"");
}

static unsigned long long f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static unsigned long long f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return (unsigned long long)u;
}

static void emit_opt_i64(const char* key, hipdnnGraphOptionalInt64_t v)
{
    CHECK(v.has_value || v.value == 0);
    if(v.has_value)
        emit(",\"%s\":%lld", key, (long long)v.value);
    else
        emit(",\"%s\":null", key);
}

static void emit_opt_f32(const char* key, hipdnnGraphOptionalFloat_t v)
{
    if(v.has_value)
        emit(",\"%s\":%llu", key, f32_bits(v.value));
    else
        emit(",\"%s\":null", key);
}

static void walk_tensor(hipdnnGraphReader_t* r, uint32_t index)
{
    hipdnnGraphTensor_t t, found;
    int64_t dims[16], strides[16], v;
    uint32_t count = 99, i;
    hipdnnGraphTensorValue_t value;
    hipdnnPluginStatus_t st;

    CHECK(hipdnnGraphReaderTensor(r, index, &t) == HIPDNN_PLUGIN_STATUS_SUCCESS);
    CHECK(t.index == index);
    CHECK(t.name != NULL && strlen(t.name) <= t.name_length);
    emit("{\"uid\":%lld,\"name\":", (long long)t.uid);
    emit_hex(t.name, t.name_length);
    emit(",\"data_type\":%d,\"virtual\":%d,\"dynamic\":%d,\"dims\":[", (int)t.data_type, t.is_virtual,
         t.is_dynamic);

    /* Count query, then the copy, then element by element: all must agree. */
    CHECK(hipdnnGraphReaderTensorDims(r, &t, NULL, 0, &count) == HIPDNN_PLUGIN_STATUS_SUCCESS && count == t.rank);
    CHECK(hipdnnGraphReaderTensorDims(r, &t, NULL, 1, &count) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);
    CHECK(hipdnnGraphReaderTensorDims(r, &t, dims, 16, &count) == HIPDNN_PLUGIN_STATUS_SUCCESS && count == t.rank);
    CHECK(hipdnnGraphReaderTensorStrides(r, &t, strides, 16, &count) == HIPDNN_PLUGIN_STATUS_SUCCESS
          && count == t.rank);
    for(i = 0; i < t.rank; ++i)
    {
        CHECK(hipdnnGraphReaderTensorDim(r, &t, i, &v) == HIPDNN_PLUGIN_STATUS_SUCCESS);
        CHECK(i >= 16 || v == dims[i]);
        emit("%s%lld", i ? "," : "", (long long)v);
    }
    emit("],\"strides\":[");
    for(i = 0; i < t.rank; ++i)
    {
        CHECK(hipdnnGraphReaderTensorStride(r, &t, i, &v) == HIPDNN_PLUGIN_STATUS_SUCCESS);
        CHECK(i >= 16 || v == strides[i]);
        emit("%s%lld", i ? "," : "", (long long)v);
    }
    emit("]");
    emit_opt_i64("ragged", t.ragged_offset_uid);
    CHECK(hipdnnGraphReaderTensorDim(r, &t, t.rank, &v) == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    CHECK(hipdnnGraphReaderTensorStride(r, &t, t.rank + 7, &v) == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    CHECK(hipdnnGraphReaderTensorDim(r, NULL, 0, &v) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);
    CHECK(hipdnnGraphReaderTensorDim(r, &t, 0, NULL) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);

    st = hipdnnGraphReaderTensorValue(r, &t, &value);
    if(t.value_type == HIPDNN_WIRE_TENSOR_VALUE_NONE)
    {
        CHECK(st == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
        emit(",\"value\":null");
    }
    else if(t.value_type > HIPDNN_WIRE_TENSOR_VALUE_BOOL)
    {
        CHECK(st == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
        emit(",\"value\":{\"type\":%u}", (unsigned)t.value_type);
    }
    else
    {
        CHECK(st == HIPDNN_PLUGIN_STATUS_SUCCESS && value.type == t.value_type);
        emit(",\"value\":{\"type\":%u,\"double_bits\":%llu,\"int64\":%lld}", (unsigned)value.type,
             f64_bits(value.as_double), (long long)value.as_int64);
    }

    /* Lookup by uid finds a tensor with that uid, at or before this one. */
    CHECK(hipdnnGraphReaderFindTensor(r, t.uid, &found) == HIPDNN_PLUGIN_STATUS_SUCCESS);
    CHECK(found.uid == t.uid && found.index <= index);
    emit("}");
}

static void walk_node(hipdnnGraphReader_t* r, uint32_t index)
{
    hipdnnGraphNode_t n;
    hipdnnGraphPointwise_t p;
    hipdnnGraphMatmul_t m;
    hipdnnGraphSdpa_t s;
    hipdnnPluginStatus_t sp, sm, ss;

    CHECK(hipdnnGraphReaderNode(r, index, &n) == HIPDNN_PLUGIN_STATUS_SUCCESS);
    CHECK(n.index == index && n.name != NULL && strlen(n.name) <= n.name_length);
    emit("{\"name\":");
    emit_hex(n.name, n.name_length);
    emit(",\"compute_data_type\":%d,\"op_type\":%u", (int)n.compute_data_type, (unsigned)n.op_type);

    sp = hipdnnGraphReaderPointwise(r, &n, &p);
    sm = hipdnnGraphReaderMatmul(r, &n, &m);
    ss = hipdnnGraphReaderSdpa(r, &n, &s);
    CHECK(sp == (n.op_type == HIPDNN_WIRE_NODE_POINTWISE ? HIPDNN_PLUGIN_STATUS_SUCCESS
                                                         : HIPDNN_PLUGIN_STATUS_INVALID_VALUE));
    CHECK(sm == (n.op_type == HIPDNN_WIRE_NODE_MATMUL ? HIPDNN_PLUGIN_STATUS_SUCCESS
                                                      : HIPDNN_PLUGIN_STATUS_INVALID_VALUE));
    CHECK(ss == (n.op_type == HIPDNN_WIRE_NODE_SDPA ? HIPDNN_PLUGIN_STATUS_SUCCESS : HIPDNN_PLUGIN_STATUS_INVALID_VALUE));
    if(sp == HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        emit(",\"pointwise\":{\"mode\":%d,\"in_0\":%lld", (int)p.mode, (long long)p.in_0_uid);
        emit_opt_i64("in_1", p.in_1_uid);
        emit_opt_i64("in_2", p.in_2_uid);
        emit(",\"out_0\":%lld", (long long)p.out_0_uid);
        emit_opt_i64("axis", p.axis_uid);
        emit_opt_f32("relu_lower_clip", p.relu_lower_clip);
        emit_opt_f32("relu_upper_clip", p.relu_upper_clip);
        emit_opt_f32("relu_lower_clip_slope", p.relu_lower_clip_slope);
        emit_opt_f32("swish_beta", p.swish_beta);
        emit_opt_f32("elu_alpha", p.elu_alpha);
        emit_opt_f32("softplus_beta", p.softplus_beta);
        emit("}");
    }
    if(sm == HIPDNN_PLUGIN_STATUS_SUCCESS)
        emit(",\"matmul\":{\"a\":%lld,\"b\":%lld,\"c\":%lld}", (long long)m.a_uid, (long long)m.b_uid,
             (long long)m.c_uid);
    if(ss == HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        emit(",\"sdpa\":{\"q\":%lld,\"k\":%lld,\"v\":%lld,\"o\":%lld", (long long)s.q_uid, (long long)s.k_uid,
             (long long)s.v_uid, (long long)s.o_uid);
        emit_opt_i64("attn_mask", s.attn_mask_uid);
        emit_opt_i64("scale", s.scale_uid);
        emit_opt_i64("seq_len_q", s.seq_len_q_uid);
        emit_opt_i64("seq_len_kv", s.seq_len_kv_uid);
        emit_opt_i64("seed", s.seed_uid);
        emit_opt_i64("offset", s.offset_uid);
        emit_opt_i64("dropout_mask", s.dropout_mask_uid);
        emit_opt_i64("dropout_scale", s.dropout_scale_uid);
        emit_opt_i64("page_table_k", s.page_table_k_uid);
        emit_opt_i64("page_table_v", s.page_table_v_uid);
        emit_opt_i64("block_mask", s.block_mask_uid);
        emit_opt_i64("sink_token", s.sink_token_uid);
        emit_opt_i64("descale_q", s.descale_q_uid);
        emit_opt_i64("descale_k", s.descale_k_uid);
        emit_opt_i64("descale_v", s.descale_v_uid);
        emit_opt_i64("descale_s", s.descale_s_uid);
        emit_opt_i64("scale_s", s.scale_s_uid);
        emit_opt_i64("scale_o", s.scale_o_uid);
        emit_opt_i64("stats", s.stats_uid);
        emit_opt_i64("max", s.max_uid);
        emit_opt_i64("sum_exp", s.sum_exp_uid);
        emit_opt_i64("rng_dump", s.rng_dump_uid);
        emit_opt_i64("amax_s", s.amax_s_uid);
        emit_opt_i64("amax_o", s.amax_o_uid);
        if(s.generate_stats.has_value)
            emit(",\"generate_stats\":%d", s.generate_stats.value);
        else
            emit(",\"generate_stats\":null");
        emit(",\"alibi_mask\":%d,\"padding_mask\":%d,\"causal_mask\":%d,\"causal_mask_bottom_right\":%d",
             s.alibi_mask, s.padding_mask, s.causal_mask, s.causal_mask_bottom_right);
        emit_opt_f32("dropout_probability", s.dropout_probability);
        emit_opt_f32("attn_scale_value", s.attn_scale_value);
        emit_opt_i64("left_bound", s.left_bound);
        emit_opt_i64("right_bound", s.right_bound);
        emit_opt_i64("max_seq_len_kv", s.max_seq_len_kv);
        emit(",\"diagonal_alignment\":%d,\"mma_core_mode\":%d,\"implementation\":%d", (int)s.diagonal_alignment,
             (int)s.mma_core_mode, (int)s.implementation);
        emit(",\"softcap\":%llu}", f32_bits(s.softcap));
    }
    emit("}");
}

static int walk(const unsigned char* buf, size_t size)
{
    hipdnnGraphReader_t r;
    hipdnnGraphTensor_t t;
    hipdnnGraphNode_t n;
    uint32_t i, tensors, nodes;
    int64_t preferred = -1;
    hipdnnPluginStatus_t st = hipdnnGraphReaderOpen(&r, buf, size);
    const char* err = hipdnnGraphReaderError(&r);

    CHECK(err != NULL && strlen(err) < HIPDNN_GRAPH_READER_ERROR_CAPACITY);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        /* A refused buffer leaves a closed reader that answers safely. */
        CHECK(st == HIPDNN_PLUGIN_STATUS_BAD_PARAM && err[0] != '\0');
        CHECK(hipdnnGraphReaderTensorCount(&r) == 0 && hipdnnGraphReaderNodeCount(&r) == 0);
        CHECK(hipdnnGraphReaderTensor(&r, 0, &t) == HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED);
        CHECK(hipdnnGraphReaderNode(&r, 0, &n) == HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED);
        CHECK(hipdnnGraphReaderFindTensor(&r, 1, &t) == HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED);
        CHECK(hipdnnGraphReaderName(&r)[0] == '\0' && !hipdnnGraphReaderPreferredEngineId(&r, &preferred));
        emit("{\"ok\":0,\"status\":%d}\n", (int)st);
        return 0;
    }
    CHECK(err[0] == '\0');
    tensors = hipdnnGraphReaderTensorCount(&r);
    nodes = hipdnnGraphReaderNodeCount(&r);
    emit("{\"ok\":1,\"name\":");
    emit_hex(hipdnnGraphReaderName(&r), hipdnnGraphReaderNameLength(&r));
    emit(",\"io_data_type\":%d,\"intermediate_data_type\":%d,\"compute_data_type\":%d,\"override\":%d",
         (int)hipdnnGraphReaderIoDataType(&r), (int)hipdnnGraphReaderIntermediateDataType(&r),
         (int)hipdnnGraphReaderComputeDataType(&r), hipdnnGraphReaderIsOverrideShapeEnabled(&r));
    if(hipdnnGraphReaderPreferredEngineId(&r, &preferred))
        emit(",\"preferred_engine_id\":%lld", (long long)preferred);
    else
        emit(",\"preferred_engine_id\":null");
    emit(",\"tensors\":[");
    for(i = 0; i < tensors; ++i)
    {
        emit("%s", i ? "," : "");
        walk_tensor(&r, i);
    }
    emit("],\"nodes\":[");
    for(i = 0; i < nodes; ++i)
    {
        emit("%s", i ? "," : "");
        walk_node(&r, i);
    }
    emit("]}\n");
    CHECK(hipdnnGraphReaderTensor(&r, tensors, &t) == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    CHECK(hipdnnGraphReaderNode(&r, nodes, &n) == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    CHECK(hipdnnGraphReaderNode(&r, 0xFFFFFFFFu, &n) == HIPDNN_PLUGIN_STATUS_INVALID_VALUE);
    CHECK(hipdnnGraphReaderTensor(&r, 0, NULL) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);
    return 1;
}

int main(int argc, char** argv)
{
    FILE* f;
    unsigned char header[4];
    unsigned long records = 0, accepted = 0;
    hipdnnGraphReader_t r;

    if(argc < 2)
    {
        fprintf(stderr, "usage: reader_driver FILE [dump]\n");
        return 2;
    }
    out_ = stdout;
    dump_ = argc > 2 && strcmp(argv[2], "dump") == 0;
    CHECK(hipdnnGraphReaderOpen(NULL, "", 0) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);
    CHECK(hipdnnGraphReaderOpen(&r, NULL, 100) == HIPDNN_PLUGIN_STATUS_BAD_PARAM);
    CHECK(hipdnnGraphReaderTensorCount(NULL) == 0);
    f = fopen(argv[1], "rb");
    if(f == NULL)
    {
        perror(argv[1]);
        return 2;
    }
    while(fread(header, 1, 4, f) == 4)
    {
        size_t size = (size_t)header[0] | ((size_t)header[1] << 8) | ((size_t)header[2] << 16)
                      | ((size_t)header[3] << 24);
        unsigned char* buf = (unsigned char*)malloc(size ? size : 1);
        CHECK(buf != NULL);
        CHECK(fread(buf, 1, size, f) == size);
        accepted += (unsigned long)walk(buf, size);
        free(buf);
        ++records;
    }
    fclose(f);
    if(!dump_)
        printf("records %lu accepted %lu\n", records, accepted);
    return 0;
}
