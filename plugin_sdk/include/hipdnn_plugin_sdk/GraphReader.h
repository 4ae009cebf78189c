/*
 * hipdnn plugin SDK: a bounds-checked reader of the serialized graph, in plain C.
 *
 * Header only: include it and call the functions; there is nothing to link.
 * Builds as C99, C11 and C++17 (-Wall -Wextra -Werror -pedantic), needs no
 * FlatBuffers library and no C++.
 *
 * The host hands an engine plugin each graph as the bytes of a FlatBuffer whose
 * root is hipdnn.wire.Graph (schema/graph.fbs and the schemas it includes). This
 * reader parses those bytes directly. Before it reads anything it checks that
 * the bytes are there: every offset, vtable, table, vector length and string
 * terminator is checked against the buffer's size, so a truncated or damaged
 * buffer is refused with HIPDNN_PLUGIN_STATUS_BAD_PARAM and a message, never
 * read past.
 *
 *     hipdnnGraphReader_t r;
 *     if(hipdnnGraphReaderOpen(&r, op_graph->ptr, op_graph->size) != HIPDNN_PLUGIN_STATUS_SUCCESS)
 *         return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, hipdnnGraphReaderError(&r));
 *     for(uint32_t i = 0; i < hipdnnGraphReaderNodeCount(&r); ++i) {
 *         hipdnnGraphNode_t node;
 *         hipdnnGraphPointwise_t pw;
 *         hipdnnGraphReaderNode(&r, i, &node);
 *         if(node.op_type == HIPDNN_WIRE_NODE_POINTWISE
 *            && hipdnnGraphReaderPointwise(&r, &node, &pw) == HIPDNN_PLUGIN_STATUS_SUCCESS) ...
 *     }
 *
 * Open walks the whole graph once (every tensor, every node and the attributes
 * of every node kind this header knows), so once it succeeds every accessor
 * succeeds for valid indices. Accessors still check every read: a reader is
 * never trusted blindly.
 *
 * Schema evolution. New fields are only ever appended to tables with defaults.
 * A field this header does not know is ignored; a field the buffer does not
 * store (an older writer) reads as its schema default; optional fields
 * (`= null` in the schema) come with a has_value flag. A node whose kind this
 * header does not know opens fine and reports its op_type; only its attributes
 * cannot be decoded.
 *
 * Lifetimes. The reader keeps a pointer to the caller's bytes and copies
 * nothing: strings it returns (names) point into the buffer, are NUL-terminated
 * (checked) and live as long as the buffer, i.e. for the plugin call that
 * received it. Copy what you keep. A reader is a plain struct with no hidden
 * state: use one per thread (or per call); any number may read one buffer.
 *
 * Status codes: SUCCESS; BAD_PARAM for a NULL argument or a malformed buffer;
 * INVALID_VALUE for an index out of range, a node decoded as the wrong kind or
 * a uid no tensor has; NOT_INITIALIZED when the reader was never opened
 * successfully. Every failure leaves a message in hipdnnGraphReaderError().
 */
#ifndef HIPDNN_PLUGIN_SDK_GRAPH_READER_H
#define HIPDNN_PLUGIN_SDK_GRAPH_READER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "PluginApiDataTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HIPDNN_PLUGIN_SDK_PRINTF_LIKE
#if defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_SDK_PRINTF_LIKE(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define HIPDNN_PLUGIN_SDK_PRINTF_LIKE(fmt, first)
#endif
#endif

/* Capacity of the reader's error message, terminator included. */
#define HIPDNN_GRAPH_READER_ERROR_CAPACITY 256
/* FlatBuffers buffers are below 2 GiB; larger ones are refused. */
#define HIPDNN_GRAPH_READER_MAX_BUFFER_SIZE ((size_t)0x7FFFFFFF)

/* ------------------------------------------------------------------------- */
/* Wire enumerations (numbers as in the schema, which follow hipDNN's)       */
/* ------------------------------------------------------------------------- */

/* Node kinds: the type ids of the NodeAttributes union. */
enum
{
    HIPDNN_WIRE_NODE_NONE = 0,
    HIPDNN_WIRE_NODE_POINTWISE = 2,
    HIPDNN_WIRE_NODE_MATMUL = 9,
    HIPDNN_WIRE_NODE_SDPA = 12
};

/* hipdnn.wire.DataType */
enum
{
    HIPDNN_WIRE_DATA_TYPE_UNSET = 0,
    HIPDNN_WIRE_DATA_TYPE_FLOAT = 1,
    HIPDNN_WIRE_DATA_TYPE_HALF = 2,
    HIPDNN_WIRE_DATA_TYPE_BFLOAT16 = 3,
    HIPDNN_WIRE_DATA_TYPE_DOUBLE = 4,
    HIPDNN_WIRE_DATA_TYPE_UINT8 = 5,
    HIPDNN_WIRE_DATA_TYPE_INT32 = 6,
    HIPDNN_WIRE_DATA_TYPE_INT8 = 7,
    HIPDNN_WIRE_DATA_TYPE_FP8_E4M3 = 8,
    HIPDNN_WIRE_DATA_TYPE_FP8_E5M2 = 9,
    HIPDNN_WIRE_DATA_TYPE_FP8_E8M0 = 10,
    HIPDNN_WIRE_DATA_TYPE_FP4_E2M1 = 11,
    HIPDNN_WIRE_DATA_TYPE_FP6_E2M3 = 12,
    HIPDNN_WIRE_DATA_TYPE_FP6_E3M2 = 13,
    HIPDNN_WIRE_DATA_TYPE_INT4 = 14,
    HIPDNN_WIRE_DATA_TYPE_INT64 = 15,
    HIPDNN_WIRE_DATA_TYPE_FP8_E4M3_FNUZ = 16,
    HIPDNN_WIRE_DATA_TYPE_FP8_E5M2_FNUZ = 17
};

/* hipdnn.wire.PointwiseMode */
enum
{
    HIPDNN_WIRE_POINTWISE_UNSET = 0,
    HIPDNN_WIRE_POINTWISE_ABS = 1,
    HIPDNN_WIRE_POINTWISE_ADD = 2,
    HIPDNN_WIRE_POINTWISE_ADD_SQUARE = 3,
    HIPDNN_WIRE_POINTWISE_BINARY_SELECT = 4,
    HIPDNN_WIRE_POINTWISE_CEIL = 5,
    HIPDNN_WIRE_POINTWISE_CMP_EQ = 6,
    HIPDNN_WIRE_POINTWISE_CMP_GE = 7,
    HIPDNN_WIRE_POINTWISE_CMP_GT = 8,
    HIPDNN_WIRE_POINTWISE_CMP_LE = 9,
    HIPDNN_WIRE_POINTWISE_CMP_LT = 10,
    HIPDNN_WIRE_POINTWISE_CMP_NEQ = 11,
    HIPDNN_WIRE_POINTWISE_DIV = 12,
    HIPDNN_WIRE_POINTWISE_ELU_BWD = 13,
    HIPDNN_WIRE_POINTWISE_ELU_FWD = 14,
    HIPDNN_WIRE_POINTWISE_ERF = 15,
    HIPDNN_WIRE_POINTWISE_EXP = 16,
    HIPDNN_WIRE_POINTWISE_FLOOR = 17,
    HIPDNN_WIRE_POINTWISE_GELU_APPROX_TANH_BWD = 18,
    HIPDNN_WIRE_POINTWISE_GELU_APPROX_TANH_FWD = 19,
    HIPDNN_WIRE_POINTWISE_GELU_BWD = 20,
    HIPDNN_WIRE_POINTWISE_GELU_FWD = 21,
    HIPDNN_WIRE_POINTWISE_GEN_INDEX = 22,
    HIPDNN_WIRE_POINTWISE_IDENTITY = 23,
    HIPDNN_WIRE_POINTWISE_LOG = 24,
    HIPDNN_WIRE_POINTWISE_LOGICAL_AND = 25,
    HIPDNN_WIRE_POINTWISE_LOGICAL_NOT = 26,
    HIPDNN_WIRE_POINTWISE_LOGICAL_OR = 27,
    HIPDNN_WIRE_POINTWISE_MAX_OP = 28,
    HIPDNN_WIRE_POINTWISE_MIN_OP = 29,
    HIPDNN_WIRE_POINTWISE_MUL = 30,
    HIPDNN_WIRE_POINTWISE_NEG = 31,
    HIPDNN_WIRE_POINTWISE_RECIPROCAL = 32,
    HIPDNN_WIRE_POINTWISE_RELU_BWD = 33,
    HIPDNN_WIRE_POINTWISE_RELU_FWD = 34,
    HIPDNN_WIRE_POINTWISE_RSQRT = 35,
    HIPDNN_WIRE_POINTWISE_SIGMOID_BWD = 36,
    HIPDNN_WIRE_POINTWISE_SIGMOID_FWD = 37,
    HIPDNN_WIRE_POINTWISE_SIN = 38,
    HIPDNN_WIRE_POINTWISE_SOFTPLUS_BWD = 39,
    HIPDNN_WIRE_POINTWISE_SOFTPLUS_FWD = 40,
    HIPDNN_WIRE_POINTWISE_SQRT = 41,
    HIPDNN_WIRE_POINTWISE_SUB = 42,
    HIPDNN_WIRE_POINTWISE_SWISH_BWD = 43,
    HIPDNN_WIRE_POINTWISE_SWISH_FWD = 44,
    HIPDNN_WIRE_POINTWISE_TAN = 45,
    HIPDNN_WIRE_POINTWISE_TANH_BWD = 46,
    HIPDNN_WIRE_POINTWISE_TANH_FWD = 47
};

/* hipdnn.wire.DiagonalAlignment and AttentionImplementation */
enum
{
    HIPDNN_WIRE_DIAGONAL_TOP_LEFT = 0,
    HIPDNN_WIRE_DIAGONAL_BOTTOM_RIGHT = 1
};
enum
{
    HIPDNN_WIRE_ATTENTION_AUTO = 0,
    HIPDNN_WIRE_ATTENTION_COMPOSITE = 1,
    HIPDNN_WIRE_ATTENTION_UNIFIED = 2
};

/* Type ids of the TensorValue union (the scalar payload of a by-value tensor). */
enum
{
    HIPDNN_WIRE_TENSOR_VALUE_NONE = 0,
    HIPDNN_WIRE_TENSOR_VALUE_FLOAT32 = 1,
    HIPDNN_WIRE_TENSOR_VALUE_FLOAT16 = 2,
    HIPDNN_WIRE_TENSOR_VALUE_BFLOAT16 = 3,
    HIPDNN_WIRE_TENSOR_VALUE_FLOAT8 = 4,
    HIPDNN_WIRE_TENSOR_VALUE_INT32 = 5,
    HIPDNN_WIRE_TENSOR_VALUE_FLOAT64 = 6,
    HIPDNN_WIRE_TENSOR_VALUE_INT64 = 7,
    HIPDNN_WIRE_TENSOR_VALUE_BOOL = 8
};

/* ------------------------------------------------------------------------- */
/* Public types                                                              */
/* ------------------------------------------------------------------------- */

/* Optional values: value is meaningful only when has_value is non-zero (it
 * holds 0 otherwise). */
typedef struct
{
    int has_value;
    int64_t value;
} hipdnnGraphOptionalInt64_t;

typedef struct
{
    int has_value;
    float value;
} hipdnnGraphOptionalFloat_t;

typedef struct
{
    int has_value;
    int value; /* 0 or 1 */
} hipdnnGraphOptionalBool_t;

/* A graph opened over a byte buffer. Fields ending in '_' are private. */
typedef struct
{
    const uint8_t* data_;
    size_t size_;
    int opened_;
    size_t graph_table_;
    size_t tensors_first_; /* position of the first element of the tensor vector */
    uint32_t tensor_count_;
    size_t nodes_first_;
    uint32_t node_count_;
    const char* name_;
    uint32_t name_length_;
    int32_t compute_data_type_;
    int32_t intermediate_data_type_;
    int32_t io_data_type_;
    hipdnnGraphOptionalInt64_t preferred_engine_id_;
    int is_override_shape_enabled_;
    char error_[HIPDNN_GRAPH_READER_ERROR_CAPACITY];
} hipdnnGraphReader_t;

/* One tensor (hipdnn.wire.TensorAttributes). */
typedef struct
{
    uint32_t index;           /* position in the graph's tensor list */
    int64_t uid;
    const char* name;         /* NUL-terminated, points into the buffer; "" when absent */
    uint32_t name_length;     /* bytes before the terminator */
    int32_t data_type;        /* HIPDNN_WIRE_DATA_TYPE_* */
    uint32_t rank;            /* number of dims, equal to the number of strides */
    int is_virtual;           /* 1: an intermediate with no buffer in the variant pack */
    int is_dynamic;           /* 1: some dims are -1, given at execute time; strides are then an
                                 axis order (lower = inner), not element strides (API >= 1.2.0) */
    uint8_t value_type;       /* HIPDNN_WIRE_TENSOR_VALUE_*: NONE unless passed by value */
    hipdnnGraphOptionalInt64_t ragged_offset_uid; /* the tensor's ragged (packed) layout: uid of an
                                 INT32/INT64 [B+1,1,1,1] tensor whose element b replaces
                                 b * strides[0] as batch b's start, in elements (API >= 1.3.0) */
    size_t table_;
    size_t dims_first_;
    size_t strides_first_;
    size_t value_table_;
} hipdnnGraphTensor_t;

/* The scalar payload of a by-value tensor: as_double holds every floating and
 * integer kind converted, as_int64 the integer and bool kinds exactly (and the
 * floating kinds truncated toward zero when in range, else 0). */
typedef struct
{
    uint8_t type; /* HIPDNN_WIRE_TENSOR_VALUE_* */
    double as_double;
    int64_t as_int64;
} hipdnnGraphTensorValue_t;

/* One node (hipdnn.wire.Node). */
typedef struct
{
    uint32_t index;            /* position in the graph's node list (topological order) */
    const char* name;          /* NUL-terminated, points into the buffer; "" when absent */
    uint32_t name_length;
    int32_t compute_data_type; /* HIPDNN_WIRE_DATA_TYPE_* */
    uint8_t op_type;           /* HIPDNN_WIRE_NODE_*, or a kind newer than this header */
    size_t attributes_table_;
} hipdnnGraphNode_t;

/* out_0 = operation(in_0[, in_1[, in_2]]), numpy-style broadcasting. */
typedef struct
{
    int32_t mode; /* HIPDNN_WIRE_POINTWISE_* */
    int64_t in_0_uid;
    hipdnnGraphOptionalInt64_t in_1_uid;
    hipdnnGraphOptionalInt64_t in_2_uid;
    int64_t out_0_uid;
    hipdnnGraphOptionalInt64_t axis_uid;
    hipdnnGraphOptionalFloat_t relu_lower_clip;
    hipdnnGraphOptionalFloat_t relu_upper_clip;
    hipdnnGraphOptionalFloat_t relu_lower_clip_slope;
    hipdnnGraphOptionalFloat_t swish_beta;
    hipdnnGraphOptionalFloat_t elu_alpha;
    hipdnnGraphOptionalFloat_t softplus_beta;
} hipdnnGraphPointwise_t;

/* C = A @ B over the last two dims; leading dims broadcast. */
typedef struct
{
    int64_t a_uid;
    int64_t b_uid;
    int64_t c_uid;
} hipdnnGraphMatmul_t;

/* Scaled dot-product attention, forward: every field of SdpaAttributes. */
typedef struct
{
    int64_t q_uid;
    int64_t k_uid;
    int64_t v_uid;
    int64_t o_uid;
    hipdnnGraphOptionalInt64_t attn_mask_uid; /* additive bias */
    hipdnnGraphOptionalInt64_t scale_uid;     /* attention scale passed as a tensor */
    hipdnnGraphOptionalInt64_t seq_len_q_uid;
    hipdnnGraphOptionalInt64_t seq_len_kv_uid;
    hipdnnGraphOptionalInt64_t seed_uid;
    hipdnnGraphOptionalInt64_t offset_uid;
    hipdnnGraphOptionalInt64_t dropout_mask_uid;
    hipdnnGraphOptionalInt64_t dropout_scale_uid;
    hipdnnGraphOptionalInt64_t page_table_k_uid;
    hipdnnGraphOptionalInt64_t page_table_v_uid;
    hipdnnGraphOptionalInt64_t block_mask_uid;
    hipdnnGraphOptionalInt64_t sink_token_uid;
    hipdnnGraphOptionalInt64_t descale_q_uid;
    hipdnnGraphOptionalInt64_t descale_k_uid;
    hipdnnGraphOptionalInt64_t descale_v_uid;
    hipdnnGraphOptionalInt64_t descale_s_uid;
    hipdnnGraphOptionalInt64_t scale_s_uid;
    hipdnnGraphOptionalInt64_t scale_o_uid;
    hipdnnGraphOptionalInt64_t stats_uid;
    hipdnnGraphOptionalInt64_t max_uid;
    hipdnnGraphOptionalInt64_t sum_exp_uid;
    hipdnnGraphOptionalInt64_t rng_dump_uid;
    hipdnnGraphOptionalInt64_t amax_s_uid;
    hipdnnGraphOptionalInt64_t amax_o_uid;
    hipdnnGraphOptionalBool_t generate_stats;
    int alibi_mask;
    int padding_mask;
    int causal_mask;              /* top-left aligned */
    int causal_mask_bottom_right;
    hipdnnGraphOptionalFloat_t dropout_probability;
    hipdnnGraphOptionalFloat_t attn_scale_value;
    hipdnnGraphOptionalInt64_t left_bound;
    hipdnnGraphOptionalInt64_t right_bound;
    hipdnnGraphOptionalInt64_t max_seq_len_kv; /* an int32 on the wire */
    int32_t diagonal_alignment; /* HIPDNN_WIRE_DIAGONAL_* */
    int32_t mma_core_mode;      /* HIPDNN_WIRE_DATA_TYPE_* */
    int32_t implementation;     /* HIPDNN_WIRE_ATTENTION_* */
    float softcap;              /* score softcapping c (API >= 1.4.0): c > 0 replaces each score s by
                                   c * tanh(s / c) before bias, ALiBi and masks; 0 (unwritten) is off */
} hipdnnGraphSdpa_t;

/* ------------------------------------------------------------------------- */
/* Internals: checked little-endian reads                                    */
/* ------------------------------------------------------------------------- */

/* A table located and checked: its position, its vtable and both sizes. */
typedef struct
{
    size_t pos;
    size_t vtable;
    size_t vtable_size;
    size_t table_size;
} hipdnnGraphTableRef_;

static inline hipdnnPluginStatus_t hipdnnGraphReaderFail_(hipdnnGraphReader_t* r, hipdnnPluginStatus_t status,
                                                          const char* fmt, ...) HIPDNN_PLUGIN_SDK_PRINTF_LIKE(3, 4);

static inline hipdnnPluginStatus_t hipdnnGraphReaderFail_(hipdnnGraphReader_t* r, hipdnnPluginStatus_t status,
                                                          const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(r->error_, sizeof r->error_, fmt, ap);
    va_end(ap);
    r->error_[sizeof r->error_ - 1] = '\0';
    return status;
}

/* Whether [pos, pos + n) lies inside the buffer (no overflow for any inputs). */
static inline int hipdnnGraphReaderHas_(const hipdnnGraphReader_t* r, size_t pos, uint64_t n)
{
    return pos <= r->size_ && n <= (uint64_t)(r->size_ - pos);
}

/* Unchecked decoders; callers check the range first. */
static inline uint16_t hipdnnGraphReaderU16_(const uint8_t* p)
{
    return (uint16_t)((unsigned)p[0] | ((unsigned)p[1] << 8));
}

static inline uint32_t hipdnnGraphReaderU32_(const uint8_t* p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t hipdnnGraphReaderU64_(const uint8_t* p)
{
    return (uint64_t)hipdnnGraphReaderU32_(p) | ((uint64_t)hipdnnGraphReaderU32_(p + 4) << 32);
}

/* Locates the table at pos and checks its vtable and inline size. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTable_(hipdnnGraphReader_t* r, size_t pos, const char* what,
                                                           hipdnnGraphTableRef_* t)
{
    uint32_t raw;
    int64_t vtable;
    if(!hipdnnGraphReaderHas_(r, pos, 4))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: table at byte %lu lies outside the %lu-byte buffer", what,
                                      (unsigned long)pos, (unsigned long)r->size_);
    raw = hipdnnGraphReaderU32_(r->data_ + pos);
    /* The table starts with a signed offset back to its vtable. */
    vtable = (int64_t)pos - (raw >= 0x80000000u ? (int64_t)raw - (int64_t)0x100000000 : (int64_t)raw);
    if(vtable < 0 || !hipdnnGraphReaderHas_(r, (size_t)vtable, 4))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: vtable of the table at byte %lu lies outside the buffer", what,
                                      (unsigned long)pos);
    t->pos = pos;
    t->vtable = (size_t)vtable;
    t->vtable_size = hipdnnGraphReaderU16_(r->data_ + t->vtable);
    t->table_size = hipdnnGraphReaderU16_(r->data_ + t->vtable + 2);
    if(t->vtable_size < 4 || (t->vtable_size & 1u) != 0 || !hipdnnGraphReaderHas_(r, t->vtable, t->vtable_size))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: vtable at byte %lu has a bad size (%lu)", what,
                                      (unsigned long)t->vtable, (unsigned long)t->vtable_size);
    if(t->table_size < 4 || !hipdnnGraphReaderHas_(r, pos, t->table_size))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: table at byte %lu claims %lu bytes, past the end of the buffer", what,
                                      (unsigned long)pos, (unsigned long)t->table_size);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Position of field `id` of a table (width bytes wide), or 0 when the field is
 * not stored. A stored field must lie inside its table. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderField_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                           unsigned id, size_t width, const char* what, size_t* at)
{
    size_t slot = 4 + 2 * (size_t)id;
    size_t off;
    *at = 0;
    if(slot + 2 > t->vtable_size)
        return HIPDNN_PLUGIN_STATUS_SUCCESS; /* written by an older schema: absent */
    if(!hipdnnGraphReaderHas_(r, t->vtable + slot, 2))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: vtable truncated", what);
    off = hipdnnGraphReaderU16_(r->data_ + t->vtable + slot);
    if(off == 0)
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    if(off < 4 || off + width > t->table_size || !hipdnnGraphReaderHas_(r, t->pos + off, width))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: field %u lies outside its table (offset %lu, table size %lu)", what, id,
                                      (unsigned long)off, (unsigned long)t->table_size);
    *at = t->pos + off;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Scalars. *present (may be NULL) says whether the field was stored. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderI64_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                         unsigned id, const char* what, int64_t* out, int* present)
{
    size_t at = 0;
    uint64_t u;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 8, what, &at);
    *out = 0;
    if(present != NULL)
        *present = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    u = hipdnnGraphReaderU64_(r->data_ + at);
    memcpy(out, &u, sizeof u);
    if(present != NULL)
        *present = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderI32_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                         unsigned id, const char* what, int32_t* out, int* present)
{
    size_t at = 0;
    uint32_t u;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 4, what, &at);
    *out = 0;
    if(present != NULL)
        *present = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    u = hipdnnGraphReaderU32_(r->data_ + at);
    memcpy(out, &u, sizeof u);
    if(present != NULL)
        *present = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderF32_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                         unsigned id, const char* what, float* out, int* present)
{
    size_t at = 0;
    uint32_t u;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 4, what, &at);
    *out = 0.0f;
    if(present != NULL)
        *present = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    u = hipdnnGraphReaderU32_(r->data_ + at);
    memcpy(out, &u, sizeof u);
    if(present != NULL)
        *present = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderF64_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                         unsigned id, const char* what, double* out)
{
    size_t at = 0;
    uint64_t u;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 8, what, &at);
    *out = 0.0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    u = hipdnnGraphReaderU64_(r->data_ + at);
    memcpy(out, &u, sizeof u);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* A one-byte field (bool, ubyte, byte enums), absent -> dflt. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderU8_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                        unsigned id, const char* what, uint8_t dflt, uint8_t* out,
                                                        int* present)
{
    size_t at = 0;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 1, what, &at);
    *out = dflt;
    if(present != NULL)
        *present = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    *out = r->data_[at];
    if(present != NULL)
        *present = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* A signed byte enum (DataType, PointwiseMode, ...), widened. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderEnum_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                          unsigned id, const char* what, int32_t* out)
{
    uint8_t b;
    hipdnnPluginStatus_t st = hipdnnGraphReaderU8_(r, t, id, what, 0, &b, NULL);
    *out = b >= 128u ? (int32_t)b - 256 : (int32_t)b;
    return st;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderOptI64_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                            unsigned id, const char* what,
                                                            hipdnnGraphOptionalInt64_t* out)
{
    return hipdnnGraphReaderI64_(r, t, id, what, &out->value, &out->has_value);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderOptF32_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                            unsigned id, const char* what,
                                                            hipdnnGraphOptionalFloat_t* out)
{
    return hipdnnGraphReaderF32_(r, t, id, what, &out->value, &out->has_value);
}

/* Follows the uoffset stored at `at` to the position it names. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderDeref_(hipdnnGraphReader_t* r, size_t at, const char* what,
                                                           size_t* target)
{
    uint32_t off;
    *target = 0;
    if(!hipdnnGraphReaderHas_(r, at, 4))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: offset outside the buffer", what);
    off = hipdnnGraphReaderU32_(r->data_ + at);
    if(off == 0 || !hipdnnGraphReaderHas_(r, at, (uint64_t)off + 4))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: offset %lu at byte %lu points outside the %lu-byte buffer", what,
                                      (unsigned long)off, (unsigned long)at, (unsigned long)r->size_);
    *target = at + off;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* A string field: absent -> "" (length 0). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderString_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                            unsigned id, const char* what, const char** s,
                                                            uint32_t* length)
{
    size_t at = 0, pos = 0;
    uint32_t n;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 4, what, &at);
    *s = "";
    *length = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    st = hipdnnGraphReaderDeref_(r, at, what, &pos);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    n = hipdnnGraphReaderU32_(r->data_ + pos);
    if(!hipdnnGraphReaderHas_(r, pos + 4, (uint64_t)n + 1))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: string of %lu bytes at byte %lu runs past the end of the buffer", what,
                                      (unsigned long)n, (unsigned long)pos);
    if(r->data_[pos + 4 + n] != 0)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: string at byte %lu is not NUL-terminated", what, (unsigned long)pos);
    *s = (const char*)(r->data_ + pos + 4);
    *length = n;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* A vector field of elements `width` bytes wide: absent -> count 0. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderVector_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                            unsigned id, size_t width, const char* what,
                                                            size_t* first, uint32_t* count)
{
    size_t at = 0, pos = 0;
    uint32_t n;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 4, what, &at);
    *first = 0;
    *count = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    st = hipdnnGraphReaderDeref_(r, at, what, &pos);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    n = hipdnnGraphReaderU32_(r->data_ + pos);
    if(!hipdnnGraphReaderHas_(r, pos + 4, (uint64_t)n * (uint64_t)width))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "%s: vector of %lu elements at byte %lu runs past the end of the buffer", what,
                                      (unsigned long)n, (unsigned long)pos);
    *first = pos + 4;
    *count = n;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* A table-valued field (or union value): absent -> *present = 0. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderSubtable_(hipdnnGraphReader_t* r, const hipdnnGraphTableRef_* t,
                                                              unsigned id, const char* what,
                                                              hipdnnGraphTableRef_* sub, int* present)
{
    size_t at = 0, pos = 0;
    hipdnnPluginStatus_t st = hipdnnGraphReaderField_(r, t, id, 4, what, &at);
    *present = 0;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS || at == 0)
        return st;
    st = hipdnnGraphReaderDeref_(r, at, what, &pos);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    st = hipdnnGraphReaderTable_(r, pos, what, sub);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        *present = 1;
    return st;
}

/* Element i of a vector of tables. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderElement_(hipdnnGraphReader_t* r, size_t first, uint32_t i,
                                                             const char* what, hipdnnGraphTableRef_* t)
{
    size_t pos = 0;
    hipdnnPluginStatus_t st = hipdnnGraphReaderDeref_(r, first + 4 * (size_t)i, what, &pos);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    return hipdnnGraphReaderTable_(r, pos, what, t);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderUsable_(hipdnnGraphReader_t* r)
{
    if(r == NULL)
        return HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    if(!r->opened_)
    {
        if(r->error_[0] == '\0')
            (void)hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED, "graph reader is not open");
        return HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED;
    }
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Field ids (declaration order in the .fbs; a union takes two: type, value). */
enum
{
    HIPDNN_GRAPH_FIELD_NAME_ = 0,
    HIPDNN_GRAPH_FIELD_COMPUTE_DATA_TYPE_ = 1,
    HIPDNN_GRAPH_FIELD_INTERMEDIATE_DATA_TYPE_ = 2,
    HIPDNN_GRAPH_FIELD_IO_DATA_TYPE_ = 3,
    HIPDNN_GRAPH_FIELD_TENSORS_ = 4,
    HIPDNN_GRAPH_FIELD_NODES_ = 5,
    HIPDNN_GRAPH_FIELD_PREFERRED_ENGINE_ID_ = 6,
    HIPDNN_GRAPH_FIELD_IS_OVERRIDE_SHAPE_ENABLED_ = 7,

    HIPDNN_TENSOR_FIELD_UID_ = 0,
    HIPDNN_TENSOR_FIELD_NAME_ = 1,
    HIPDNN_TENSOR_FIELD_DATA_TYPE_ = 2,
    HIPDNN_TENSOR_FIELD_STRIDES_ = 3,
    HIPDNN_TENSOR_FIELD_DIMS_ = 4,
    HIPDNN_TENSOR_FIELD_VIRTUAL_ = 5,
    HIPDNN_TENSOR_FIELD_VALUE_TYPE_ = 6,
    HIPDNN_TENSOR_FIELD_VALUE_ = 7,
    HIPDNN_TENSOR_FIELD_IS_DYNAMIC_ = 8,
    HIPDNN_TENSOR_FIELD_RAGGED_OFFSET_ = 9,

    HIPDNN_NODE_FIELD_NAME_ = 0,
    HIPDNN_NODE_FIELD_COMPUTE_DATA_TYPE_ = 1,
    HIPDNN_NODE_FIELD_ATTRIBUTES_TYPE_ = 2,
    HIPDNN_NODE_FIELD_ATTRIBUTES_ = 3
};

/* ------------------------------------------------------------------------- */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------- */

static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorAt_(hipdnnGraphReader_t* r, uint32_t index,
                                                              hipdnnGraphTensor_t* out)
{
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    hipdnnGraphTableRef_ value = {0, 0, 0, 0};
    hipdnnPluginStatus_t st;
    uint32_t strides_count = 0;
    uint8_t is_virtual = 0;
    uint8_t is_dynamic = 0;
    int has_value = 0;
    const char* what = "tensor";

    memset(out, 0, sizeof *out);
    out->name = "";
    out->index = index;
    st = hipdnnGraphReaderElement_(r, r->tensors_first_, index, what, &t);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderI64_(r, &t, HIPDNN_TENSOR_FIELD_UID_, what, &out->uid, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderString_(r, &t, HIPDNN_TENSOR_FIELD_NAME_, what, &out->name, &out->name_length);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderEnum_(r, &t, HIPDNN_TENSOR_FIELD_DATA_TYPE_, what, &out->data_type);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderVector_(r, &t, HIPDNN_TENSOR_FIELD_STRIDES_, 8, what, &out->strides_first_,
                                      &strides_count);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderVector_(r, &t, HIPDNN_TENSOR_FIELD_DIMS_, 8, what, &out->dims_first_, &out->rank);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderU8_(r, &t, HIPDNN_TENSOR_FIELD_VIRTUAL_, what, 0, &is_virtual, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderU8_(r, &t, HIPDNN_TENSOR_FIELD_VALUE_TYPE_, what, 0, &out->value_type, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS && out->value_type != HIPDNN_WIRE_TENSOR_VALUE_NONE)
        st = hipdnnGraphReaderSubtable_(r, &t, HIPDNN_TENSOR_FIELD_VALUE_, what, &value, &has_value);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderU8_(r, &t, HIPDNN_TENSOR_FIELD_IS_DYNAMIC_, what, 0, &is_dynamic, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderOptI64_(r, &t, HIPDNN_TENSOR_FIELD_RAGGED_OFFSET_, what, &out->ragged_offset_uid);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    out->table_ = t.pos;
    out->is_virtual = is_virtual != 0;
    out->is_dynamic = is_dynamic != 0;
    if(strides_count != out->rank)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "tensor %lu (uid %lld): %lu dims but %lu strides", (unsigned long)index,
                                      (long long)out->uid, (unsigned long)out->rank, (unsigned long)strides_count);
    if(out->value_type != HIPDNN_WIRE_TENSOR_VALUE_NONE && !has_value)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "tensor %lu (uid %lld): value of type %u is missing", (unsigned long)index,
                                      (long long)out->uid, (unsigned)out->value_type);
    out->value_table_ = has_value ? value.pos : 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Number of tensors (0 for a reader that is not open). */
static inline uint32_t hipdnnGraphReaderTensorCount(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->tensor_count_ : 0;
}

/* Tensor `index` (0 <= index < TensorCount). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTensor(hipdnnGraphReader_t* r, uint32_t index,
                                                           hipdnnGraphTensor_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "tensor: out is NULL");
    if(index >= r->tensor_count_)
    {
        memset(out, 0, sizeof *out);
        out->name = "";
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE,
                                      "tensor index %lu out of range (the graph has %lu tensors)",
                                      (unsigned long)index, (unsigned long)r->tensor_count_);
    }
    return hipdnnGraphReaderTensorAt_(r, index, out);
}

/* The first tensor whose uid is `uid`; INVALID_VALUE when none has it. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderFindTensor(hipdnnGraphReader_t* r, int64_t uid,
                                                               hipdnnGraphTensor_t* out)
{
    uint32_t i;
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "find tensor: out is NULL");
    for(i = 0; i < r->tensor_count_; ++i)
    {
        st = hipdnnGraphReaderTensorAt_(r, i, out);
        if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
            return st;
        if(out->uid == uid)
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
    }
    memset(out, 0, sizeof *out);
    out->name = "";
    return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE, "no tensor has uid %lld", (long long)uid);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorI64At_(hipdnnGraphReader_t* r,
                                                                 const hipdnnGraphTensor_t* t, size_t first,
                                                                 uint32_t i, const char* what, int64_t* out)
{
    uint64_t u;
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(t == NULL || out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "tensor %s: NULL argument", what);
    *out = 0;
    if(i >= t->rank)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE,
                                      "tensor uid %lld: %s index %lu out of range (rank %lu)", (long long)t->uid,
                                      what, (unsigned long)i, (unsigned long)t->rank);
    if(first == 0 || !hipdnnGraphReaderHas_(r, first + 8 * (size_t)i, 8))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "tensor uid %lld: %s[%lu] lies outside the buffer (stale tensor?)",
                                      (long long)t->uid, what, (unsigned long)i);
    u = hipdnnGraphReaderU64_(r->data_ + first + 8 * (size_t)i);
    memcpy(out, &u, sizeof u);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* dims[i] of a tensor, 0 <= i < rank. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorDim(hipdnnGraphReader_t* r, const hipdnnGraphTensor_t* t,
                                                              uint32_t i, int64_t* dim)
{
    return hipdnnGraphReaderTensorI64At_(r, t, t != NULL ? t->dims_first_ : 0, i, "dim", dim);
}

/* strides[i] of a tensor, 0 <= i < rank. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorStride(hipdnnGraphReader_t* r,
                                                                 const hipdnnGraphTensor_t* t, uint32_t i,
                                                                 int64_t* stride)
{
    return hipdnnGraphReaderTensorI64At_(r, t, t != NULL ? t->strides_first_ : 0, i, "stride", stride);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorCopy_(hipdnnGraphReader_t* r, const hipdnnGraphTensor_t* t,
                                                                int strides, int64_t* values, uint32_t max_values,
                                                                uint32_t* count)
{
    uint32_t i;
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(t == NULL || count == NULL || (values == NULL && max_values > 0))
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "tensor %s: NULL argument",
                                      strides ? "strides" : "dims");
    *count = t->rank;
    for(i = 0; i < t->rank && i < max_values; ++i)
    {
        st = strides ? hipdnnGraphReaderTensorStride(r, t, i, &values[i]) : hipdnnGraphReaderTensorDim(r, t, i, &values[i]);
        if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
            return st;
    }
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Copies at most max_dims dims and stores the rank in *count (the SDK's
 * count convention: max_dims == 0 with dims == NULL asks for the rank). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorDims(hipdnnGraphReader_t* r, const hipdnnGraphTensor_t* t,
                                                               int64_t* dims, uint32_t max_dims, uint32_t* count)
{
    return hipdnnGraphReaderTensorCopy_(r, t, 0, dims, max_dims, count);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorStrides(hipdnnGraphReader_t* r,
                                                                  const hipdnnGraphTensor_t* t, int64_t* strides,
                                                                  uint32_t max_strides, uint32_t* count)
{
    return hipdnnGraphReaderTensorCopy_(r, t, 1, strides, max_strides, count);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorValueAt_(hipdnnGraphReader_t* r,
                                                                    const hipdnnGraphTensor_t* t,
                                                                    hipdnnGraphTensorValue_t* out)
{
    hipdnnGraphTableRef_ v = {0, 0, 0, 0};
    hipdnnPluginStatus_t st;
    const char* what = "tensor value";
    int32_t i32 = 0;
    int64_t i64 = 0;
    float f32 = 0.0f;
    double f64 = 0.0;
    uint8_t u8 = 0;
    memset(out, 0, sizeof *out);
    if(t->value_type == HIPDNN_WIRE_TENSOR_VALUE_NONE || t->value_table_ == 0)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE, "tensor uid %lld has no value",
                                      (long long)t->uid);
    st = hipdnnGraphReaderTable_(r, t->value_table_, what, &v);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    out->type = t->value_type;
    switch(t->value_type)
    {
    case HIPDNN_WIRE_TENSOR_VALUE_FLOAT32:
    case HIPDNN_WIRE_TENSOR_VALUE_FLOAT16:
    case HIPDNN_WIRE_TENSOR_VALUE_BFLOAT16:
        st = hipdnnGraphReaderF32_(r, &v, 0, what, &f32, NULL);
        f64 = (double)f32;
        break;
    case HIPDNN_WIRE_TENSOR_VALUE_FLOAT64:
        st = hipdnnGraphReaderF64_(r, &v, 0, what, &f64);
        break;
    case HIPDNN_WIRE_TENSOR_VALUE_FLOAT8:
    case HIPDNN_WIRE_TENSOR_VALUE_BOOL:
        st = hipdnnGraphReaderU8_(r, &v, 0, what, 0, &u8, NULL);
        i64 = t->value_type == HIPDNN_WIRE_TENSOR_VALUE_BOOL ? (u8 != 0) : (int64_t)u8;
        f64 = (double)i64;
        break;
    case HIPDNN_WIRE_TENSOR_VALUE_INT32:
        st = hipdnnGraphReaderI32_(r, &v, 0, what, &i32, NULL);
        i64 = i32;
        f64 = (double)i32;
        break;
    case HIPDNN_WIRE_TENSOR_VALUE_INT64:
        st = hipdnnGraphReaderI64_(r, &v, 0, what, &i64, NULL);
        f64 = (double)i64;
        break;
    default:
        memset(out, 0, sizeof *out);
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE,
                                      "tensor uid %lld: value kind %u is unknown to this SDK", (long long)t->uid,
                                      (unsigned)t->value_type);
    }
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(t->value_type == HIPDNN_WIRE_TENSOR_VALUE_FLOAT32 || t->value_type == HIPDNN_WIRE_TENSOR_VALUE_FLOAT16
       || t->value_type == HIPDNN_WIRE_TENSOR_VALUE_BFLOAT16 || t->value_type == HIPDNN_WIRE_TENSOR_VALUE_FLOAT64)
        i64 = (f64 > -9.2e18 && f64 < 9.2e18) ? (int64_t)f64 : 0; /* NaN compares false: 0 */
    out->as_double = f64;
    out->as_int64 = i64;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* The scalar of a by-value tensor; INVALID_VALUE when it has none (or of a
 * kind newer than this header). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderTensorValue(hipdnnGraphReader_t* r, const hipdnnGraphTensor_t* t,
                                                                hipdnnGraphTensorValue_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(t == NULL || out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "tensor value: NULL argument");
    return hipdnnGraphReaderTensorValueAt_(r, t, out);
}

/* ------------------------------------------------------------------------- */
/* Nodes                                                                     */
/* ------------------------------------------------------------------------- */

static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodePointwise_(hipdnnGraphReader_t* r, size_t pos,
                                                                     hipdnnGraphPointwise_t* p);
static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodeMatmul_(hipdnnGraphReader_t* r, size_t pos,
                                                                  hipdnnGraphMatmul_t* m);
static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodeSdpa_(hipdnnGraphReader_t* r, size_t pos,
                                                                hipdnnGraphSdpa_t* s);

static inline hipdnnPluginStatus_t hipdnnGraphReaderNodeAt_(hipdnnGraphReader_t* r, uint32_t index,
                                                            hipdnnGraphNode_t* out)
{
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    hipdnnGraphTableRef_ attrs = {0, 0, 0, 0};
    hipdnnPluginStatus_t st;
    int present = 0;
    const char* what = "node";

    memset(out, 0, sizeof *out);
    out->name = "";
    out->index = index;
    st = hipdnnGraphReaderElement_(r, r->nodes_first_, index, what, &t);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderString_(r, &t, HIPDNN_NODE_FIELD_NAME_, what, &out->name, &out->name_length);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderEnum_(r, &t, HIPDNN_NODE_FIELD_COMPUTE_DATA_TYPE_, what, &out->compute_data_type);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderU8_(r, &t, HIPDNN_NODE_FIELD_ATTRIBUTES_TYPE_, what, 0, &out->op_type, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS && out->op_type != HIPDNN_WIRE_NODE_NONE)
        st = hipdnnGraphReaderSubtable_(r, &t, HIPDNN_NODE_FIELD_ATTRIBUTES_, what, &attrs, &present);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(out->op_type != HIPDNN_WIRE_NODE_NONE && !present)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "node %lu (%s): attributes of kind %u are missing", (unsigned long)index,
                                      out->name, (unsigned)out->op_type);
    out->attributes_table_ = present ? attrs.pos : 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Number of nodes (0 for a reader that is not open). */
static inline uint32_t hipdnnGraphReaderNodeCount(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->node_count_ : 0;
}

/* Node `index` (0 <= index < NodeCount), in topological order. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderNode(hipdnnGraphReader_t* r, uint32_t index,
                                                         hipdnnGraphNode_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "node: out is NULL");
    if(index >= r->node_count_)
    {
        memset(out, 0, sizeof *out);
        out->name = "";
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE,
                                      "node index %lu out of range (the graph has %lu nodes)", (unsigned long)index,
                                      (unsigned long)r->node_count_);
    }
    return hipdnnGraphReaderNodeAt_(r, index, out);
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderNodeKind_(hipdnnGraphReader_t* r, const hipdnnGraphNode_t* n,
                                                              const void* out, uint8_t kind, const char* kind_name)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderUsable_(r);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(n == NULL || out == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s attributes: NULL argument", kind_name);
    if(n->op_type != kind || n->attributes_table_ == 0)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_INVALID_VALUE,
                                      "node %lu is of kind %u, not %s (%u)", (unsigned long)n->index,
                                      (unsigned)n->op_type, kind_name, (unsigned)kind);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodePointwise_(hipdnnGraphReader_t* r, size_t pos,
                                                                     hipdnnGraphPointwise_t* p)
{
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    const char* w = "pointwise attributes";
    hipdnnPluginStatus_t st;
    memset(p, 0, sizeof *p);
    st = hipdnnGraphReaderTable_(r, pos, w, &t);
#define HIPDNN_GR_STEP_(call)                                                                                          \
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)                                                                             \
    st = (call)
    HIPDNN_GR_STEP_(hipdnnGraphReaderEnum_(r, &t, 0, w, &p->mode));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 1, w, &p->relu_lower_clip));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 2, w, &p->relu_upper_clip));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 3, w, &p->relu_lower_clip_slope));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 4, w, &p->axis_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 5, w, &p->in_0_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 6, w, &p->in_1_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 7, w, &p->in_2_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 8, w, &p->out_0_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 9, w, &p->swish_beta));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 10, w, &p->elu_alpha));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 11, w, &p->softplus_beta));
    return st;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodeMatmul_(hipdnnGraphReader_t* r, size_t pos,
                                                                  hipdnnGraphMatmul_t* m)
{
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    const char* w = "matmul attributes";
    hipdnnPluginStatus_t st;
    memset(m, 0, sizeof *m);
    st = hipdnnGraphReaderTable_(r, pos, w, &t);
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 0, w, &m->a_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 1, w, &m->b_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 2, w, &m->c_uid, NULL));
    return st;
}

static inline hipdnnPluginStatus_t hipdnnGraphReaderDecodeSdpa_(hipdnnGraphReader_t* r, size_t pos,
                                                                hipdnnGraphSdpa_t* s)
{
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    const char* w = "sdpa attributes";
    hipdnnPluginStatus_t st;
    uint8_t b = 0;
    int32_t i32 = 0;
    memset(s, 0, sizeof *s);
    st = hipdnnGraphReaderTable_(r, pos, w, &t);
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 0, w, &s->q_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 1, w, &s->k_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 2, w, &s->v_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI64_(r, &t, 3, w, &s->o_uid, NULL));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 4, w, &s->attn_mask_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 5, w, &s->scale_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 6, w, &s->seq_len_q_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 7, w, &s->seq_len_kv_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 8, w, &s->seed_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 9, w, &s->offset_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 10, w, &s->dropout_mask_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 11, w, &s->dropout_scale_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 12, w, &s->page_table_k_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 13, w, &s->page_table_v_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 14, w, &s->block_mask_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 15, w, &s->sink_token_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 16, w, &s->descale_q_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 17, w, &s->descale_k_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 18, w, &s->descale_v_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 19, w, &s->descale_s_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 20, w, &s->scale_s_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 21, w, &s->scale_o_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 22, w, &s->stats_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 23, w, &s->max_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 24, w, &s->sum_exp_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 25, w, &s->rng_dump_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 26, w, &s->amax_s_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 27, w, &s->amax_o_uid));
    HIPDNN_GR_STEP_(hipdnnGraphReaderU8_(r, &t, 28, w, 0, &b, &s->generate_stats.has_value));
    s->generate_stats.value = b != 0;
    HIPDNN_GR_STEP_(hipdnnGraphReaderU8_(r, &t, 29, w, 0, &b, NULL));
    s->alibi_mask = b != 0;
    HIPDNN_GR_STEP_(hipdnnGraphReaderU8_(r, &t, 30, w, 0, &b, NULL));
    s->padding_mask = b != 0;
    HIPDNN_GR_STEP_(hipdnnGraphReaderU8_(r, &t, 31, w, 0, &b, NULL));
    s->causal_mask = b != 0;
    HIPDNN_GR_STEP_(hipdnnGraphReaderU8_(r, &t, 32, w, 0, &b, NULL));
    s->causal_mask_bottom_right = b != 0;
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 33, w, &s->dropout_probability));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptF32_(r, &t, 34, w, &s->attn_scale_value));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 35, w, &s->left_bound));
    HIPDNN_GR_STEP_(hipdnnGraphReaderOptI64_(r, &t, 36, w, &s->right_bound));
    HIPDNN_GR_STEP_(hipdnnGraphReaderI32_(r, &t, 37, w, &i32, &s->max_seq_len_kv.has_value));
    s->max_seq_len_kv.value = i32;
    HIPDNN_GR_STEP_(hipdnnGraphReaderEnum_(r, &t, 38, w, &s->diagonal_alignment));
    HIPDNN_GR_STEP_(hipdnnGraphReaderEnum_(r, &t, 39, w, &s->mma_core_mode));
    HIPDNN_GR_STEP_(hipdnnGraphReaderEnum_(r, &t, 40, w, &s->implementation));
    HIPDNN_GR_STEP_(hipdnnGraphReaderF32_(r, &t, 41, w, &s->softcap, NULL));
#undef HIPDNN_GR_STEP_
    return st;
}

/* The attributes of a pointwise node (INVALID_VALUE for any other kind). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderPointwise(hipdnnGraphReader_t* r, const hipdnnGraphNode_t* node,
                                                              hipdnnGraphPointwise_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderNodeKind_(r, node, out, HIPDNN_WIRE_NODE_POINTWISE, "pointwise");
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        if(out != NULL)
            memset(out, 0, sizeof *out);
        return st;
    }
    return hipdnnGraphReaderDecodePointwise_(r, node->attributes_table_, out);
}

/* The attributes of a matmul node (INVALID_VALUE for any other kind). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderMatmul(hipdnnGraphReader_t* r, const hipdnnGraphNode_t* node,
                                                           hipdnnGraphMatmul_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderNodeKind_(r, node, out, HIPDNN_WIRE_NODE_MATMUL, "matmul");
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        if(out != NULL)
            memset(out, 0, sizeof *out);
        return st;
    }
    return hipdnnGraphReaderDecodeMatmul_(r, node->attributes_table_, out);
}

/* The attributes of an SDPA node (INVALID_VALUE for any other kind). */
static inline hipdnnPluginStatus_t hipdnnGraphReaderSdpa(hipdnnGraphReader_t* r, const hipdnnGraphNode_t* node,
                                                         hipdnnGraphSdpa_t* out)
{
    hipdnnPluginStatus_t st = hipdnnGraphReaderNodeKind_(r, node, out, HIPDNN_WIRE_NODE_SDPA, "sdpa");
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        if(out != NULL)
            memset(out, 0, sizeof *out);
        return st;
    }
    return hipdnnGraphReaderDecodeSdpa_(r, node->attributes_table_, out);
}

/* ------------------------------------------------------------------------- */
/* Opening a graph                                                           */
/* ------------------------------------------------------------------------- */

/* Opens a reader over size bytes at data and checks the whole graph. On
 * failure the reader stays closed (every accessor answers NOT_INITIALIZED)
 * and hipdnnGraphReaderError says what is wrong. */
static inline hipdnnPluginStatus_t hipdnnGraphReaderOpen(hipdnnGraphReader_t* r, const void* data, size_t size)
{
    hipdnnGraphTableRef_ g = {0, 0, 0, 0};
    hipdnnPluginStatus_t st;
    size_t root = 0;
    uint32_t i;
    uint8_t flag = 0;
    const char* what = "graph";

    if(r == NULL)
        return HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    memset(r, 0, sizeof *r);
    r->name_ = "";
    if(data == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "graph buffer is NULL");
    if(size < 12)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                      "graph buffer of %lu bytes is too short to hold a graph", (unsigned long)size);
    if(size > HIPDNN_GRAPH_READER_MAX_BUFFER_SIZE)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "graph buffer of %lu bytes is too large",
                                      (unsigned long)size);
    r->data_ = (const uint8_t*)data;
    r->size_ = size;

    st = hipdnnGraphReaderDeref_(r, 0, "graph root", &root);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderTable_(r, root, what, &g);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderString_(r, &g, HIPDNN_GRAPH_FIELD_NAME_, what, &r->name_, &r->name_length_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderEnum_(r, &g, HIPDNN_GRAPH_FIELD_COMPUTE_DATA_TYPE_, what, &r->compute_data_type_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderEnum_(r, &g, HIPDNN_GRAPH_FIELD_INTERMEDIATE_DATA_TYPE_, what,
                                    &r->intermediate_data_type_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderEnum_(r, &g, HIPDNN_GRAPH_FIELD_IO_DATA_TYPE_, what, &r->io_data_type_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderVector_(r, &g, HIPDNN_GRAPH_FIELD_TENSORS_, 4, "graph tensors", &r->tensors_first_,
                                      &r->tensor_count_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderVector_(r, &g, HIPDNN_GRAPH_FIELD_NODES_, 4, "graph nodes", &r->nodes_first_,
                                      &r->node_count_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderOptI64_(r, &g, HIPDNN_GRAPH_FIELD_PREFERRED_ENGINE_ID_, what,
                                      &r->preferred_engine_id_);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderU8_(r, &g, HIPDNN_GRAPH_FIELD_IS_OVERRIDE_SHAPE_ENABLED_, what, 0, &flag, NULL);
    r->graph_table_ = g.pos;
    r->is_override_shape_enabled_ = flag != 0;

    /* Walk everything once so that later accessors cannot meet a bad byte. */
    for(i = 0; st == HIPDNN_PLUGIN_STATUS_SUCCESS && i < r->tensor_count_; ++i)
    {
        hipdnnGraphTensor_t t;
        hipdnnGraphTensorValue_t value;
        st = hipdnnGraphReaderTensorAt_(r, i, &t);
        if(st == HIPDNN_PLUGIN_STATUS_SUCCESS && t.value_type != HIPDNN_WIRE_TENSOR_VALUE_NONE
           && t.value_type <= HIPDNN_WIRE_TENSOR_VALUE_BOOL)
            st = hipdnnGraphReaderTensorValueAt_(r, &t, &value);
    }
    for(i = 0; st == HIPDNN_PLUGIN_STATUS_SUCCESS && i < r->node_count_; ++i)
    {
        hipdnnGraphNode_t n;
        st = hipdnnGraphReaderNodeAt_(r, i, &n);
        if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
            break;
        if(n.op_type == HIPDNN_WIRE_NODE_POINTWISE)
        {
            hipdnnGraphPointwise_t p;
            st = hipdnnGraphReaderDecodePointwise_(r, n.attributes_table_, &p);
        }
        else if(n.op_type == HIPDNN_WIRE_NODE_MATMUL)
        {
            hipdnnGraphMatmul_t m;
            st = hipdnnGraphReaderDecodeMatmul_(r, n.attributes_table_, &m);
        }
        else if(n.op_type == HIPDNN_WIRE_NODE_SDPA)
        {
            hipdnnGraphSdpa_t s;
            st = hipdnnGraphReaderDecodeSdpa_(r, n.attributes_table_, &s);
        }
    }
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        /* Keep the message, forget the rest. */
        char message[HIPDNN_GRAPH_READER_ERROR_CAPACITY];
        memcpy(message, r->error_, sizeof message);
        memset(r, 0, sizeof *r);
        memcpy(r->error_, message, sizeof message);
        r->name_ = "";
        return st;
    }
    r->opened_ = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* The message of the reader's last failure ("" when none). Never NULL. */
static inline const char* hipdnnGraphReaderError(const hipdnnGraphReader_t* r)
{
    return r != NULL ? r->error_ : "graph reader is NULL";
}

/* Graph-level attributes. A reader that is not open answers the defaults. */
static inline const char* hipdnnGraphReaderName(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->name_ : "";
}

static inline uint32_t hipdnnGraphReaderNameLength(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->name_length_ : 0;
}

static inline int32_t hipdnnGraphReaderIoDataType(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->io_data_type_ : HIPDNN_WIRE_DATA_TYPE_UNSET;
}

static inline int32_t hipdnnGraphReaderIntermediateDataType(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->intermediate_data_type_ : HIPDNN_WIRE_DATA_TYPE_UNSET;
}

static inline int32_t hipdnnGraphReaderComputeDataType(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->compute_data_type_ : HIPDNN_WIRE_DATA_TYPE_UNSET;
}

/* 1 when the graph was built with execute-time shape overrides enabled (its
 * dims are then maxima and execution may come through the override entry). */
static inline int hipdnnGraphReaderIsOverrideShapeEnabled(const hipdnnGraphReader_t* r)
{
    return r != NULL && r->opened_ ? r->is_override_shape_enabled_ : 0;
}

/* Returns 1 and stores the id when the graph names a preferred engine, else 0. */
static inline int hipdnnGraphReaderPreferredEngineId(const hipdnnGraphReader_t* r, int64_t* engine_id)
{
    int has = r != NULL && r->opened_ && r->preferred_engine_id_.has_value;
    if(engine_id != NULL)
        *engine_id = has ? r->preferred_engine_id_.value : 0;
    return has;
}

/* ------------------------------------------------------------------------- */
/* Engine configs                                                            */
/* ------------------------------------------------------------------------- */

/* What CreateExecutionContext / GetWorkspaceSize receive as engine_config: a
 * serialized hipdnn.wire.EngineConfig. Only the engine id and the number of
 * knob settings are decoded. */
typedef struct
{
    int64_t engine_id;
    uint32_t knob_count;
    hipdnnGraphReader_t wire_; /* buffer and error message */
} hipdnnEngineConfigReader_t;

static inline hipdnnPluginStatus_t hipdnnEngineConfigReaderOpen(hipdnnEngineConfigReader_t* c, const void* data,
                                                                size_t size)
{
    hipdnnGraphReader_t* r;
    hipdnnGraphTableRef_ t = {0, 0, 0, 0};
    hipdnnPluginStatus_t st;
    size_t root = 0, first = 0;
    const char* what = "engine config";
    if(c == NULL)
        return HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    memset(c, 0, sizeof *c);
    r = &c->wire_;
    r->name_ = "";
    if(data == NULL)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine config buffer is NULL");
    if(size < 12 || size > HIPDNN_GRAPH_READER_MAX_BUFFER_SIZE)
        return hipdnnGraphReaderFail_(r, HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine config buffer of %lu bytes",
                                      (unsigned long)size);
    r->data_ = (const uint8_t*)data;
    r->size_ = size;
    st = hipdnnGraphReaderDeref_(r, 0, what, &root);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderTable_(r, root, what, &t);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderI64_(r, &t, 0, what, &c->engine_id, NULL);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderVector_(r, &t, 1, 4, what, &first, &c->knob_count);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        c->engine_id = 0;
        c->knob_count = 0;
        return st;
    }
    r->opened_ = 1;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static inline const char* hipdnnEngineConfigReaderError(const hipdnnEngineConfigReader_t* c)
{
    return c != NULL ? c->wire_.error_ : "engine config reader is NULL";
}

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_PLUGIN_SDK_GRAPH_READER_H */
