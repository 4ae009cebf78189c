/*
 * hipdnn fuzz harness (issue #16): raw graph buffers through the C graph reader (GraphReader.h) and
 * through the CPU engine's own reader and planner, built with -fsanitize=address,undefined
 * -fno-sanitize-recover=all so that any out-of-bounds access, use after free, leak or undefined
 * behaviour aborts the run. tools/fuzz/CMakeLists.txt links the CPU engine's sources into this
 * executable; tools/fuzz/asan_fuzz.py generates the cases and reads the summary.
 *
 *   asan_harness [FILE]      (FILE, or stdin when absent or "-")
 *
 * Input: records of a little-endian uint32 length followed by that many bytes. Each record is
 * copied into a heap block of exactly its size (so a read one byte past it is caught) and:
 *   1. opened with hipdnnGraphReaderOpen; when that succeeds, every tensor, node and attribute
 *      accessor is called, including out-of-range indices;
 *   2. handed to the CPU engine: GetApplicableEngineIds; when applicable, GetEngineDetails,
 *      GetWorkspaceSize, CreateExecutionContext and GetWorkspaceSizeFromExecutionContext; then,
 *      when the reader could read the tensors and they are small, ExecuteOpGraph (or the override
 *      entry, giving dynamic tensors a concrete shape) on heap buffers of exactly the bytes each
 *      tensor's dims and strides address, and a workspace of exactly the size the engine asked for.
 * Output: one JSON line of counts on stdout. Exit status 0 unless a sanitizer stopped the run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hipdnn_plugin_sdk/EnginePluginApi.h"
#include "hipdnn_plugin_sdk/GraphReader.h"

/* Execution is skipped (the record still counts as planned) beyond these: mutated dims ask for
 * terabytes, and the point here is memory safety, not allocation. */
#define MAX_ELEMENTS (1 << 15)
#define MAX_WORKSPACE ((size_t)32 << 20)
#define MAX_RANK 16
#define MAX_TENSORS 64

/* A serialized hipdnn.wire.EngineConfig { engine_id: 101 } (what the host passes for the CPU engine). */
static const uint8_t kConfig[] = {0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x0c, 0x00, 0x04, 0x00,
                                  0x06, 0x00, 0x00, 0x00, 0x65, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

typedef struct
{
    unsigned long records, reader_ok, applicable, not_applicable, plugin_errors, contexts, executed,
        execute_refused, too_large;
} Counts;

/* Releasing what the engine handed out must always succeed: anything else is a finding. */
static void must(hipdnnPluginStatus_t st, const char* what)
{
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        fprintf(stderr, "asan_harness: %s failed with status %d\n", what, (int)st);
        exit(3);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void)
{
    /* xorshift64*: buffer contents only, so any generator will do */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t element_size(int32_t data_type)
{
    switch(data_type)
    {
    case HIPDNN_WIRE_DATA_TYPE_DOUBLE:
    case HIPDNN_WIRE_DATA_TYPE_INT64:
        return 8;
    case HIPDNN_WIRE_DATA_TYPE_FLOAT:
    case HIPDNN_WIRE_DATA_TYPE_INT32:
        return 4;
    case HIPDNN_WIRE_DATA_TYPE_HALF:
    case HIPDNN_WIRE_DATA_TYPE_BFLOAT16:
        return 2;
    default:
        return 1;
    }
}

/* Every accessor of an opened reader, valid indices and invalid ones. The answers are not checked
 * here (tests/sdk does that); the point is that none of them touches memory it should not. */
static void walk_reader(hipdnnGraphReader_t* r)
{
    uint32_t i, j, n = 0;
    int64_t v = 0, dims[MAX_RANK];
    hipdnnGraphTensor_t t, found;
    hipdnnGraphTensorValue_t value;
    hipdnnGraphNode_t node;
    hipdnnGraphPointwise_t pw;
    hipdnnGraphMatmul_t mm;
    hipdnnGraphSdpa_t sdpa;

    (void)hipdnnGraphReaderName(r);
    (void)hipdnnGraphReaderPreferredEngineId(r, &v);
    for(i = 0; i <= hipdnnGraphReaderTensorCount(r); ++i)
    {
        if(hipdnnGraphReaderTensor(r, i, &t) != HIPDNN_PLUGIN_STATUS_SUCCESS)
            continue;
        (void)hipdnnGraphReaderTensorDims(r, &t, dims, MAX_RANK, &n);
        (void)hipdnnGraphReaderTensorStrides(r, &t, dims, MAX_RANK, &n);
        for(j = 0; j <= t.rank; ++j)
        {
            (void)hipdnnGraphReaderTensorDim(r, &t, j, &v);
            (void)hipdnnGraphReaderTensorStride(r, &t, j, &v);
        }
        (void)hipdnnGraphReaderTensorValue(r, &t, &value);
        (void)hipdnnGraphReaderFindTensor(r, t.uid, &found);
        (void)hipdnnGraphReaderFindTensor(r, (int64_t)((uint64_t)t.uid + 1u), &found);
    }
    for(i = 0; i <= hipdnnGraphReaderNodeCount(r); ++i)
    {
        if(hipdnnGraphReaderNode(r, i, &node) != HIPDNN_PLUGIN_STATUS_SUCCESS)
            continue;
        (void)hipdnnGraphReaderPointwise(r, &node, &pw);
        (void)hipdnnGraphReaderMatmul(r, &node, &mm);
        (void)hipdnnGraphReaderSdpa(r, &node, &sdpa);
    }
}

typedef struct
{
    int64_t uid;
    uint32_t rank;
    int overridden;
    int64_t dims[MAX_RANK];
    int64_t strides[MAX_RANK];
    size_t bytes;
    void* data;
} Buffer;

/* The call layout of tensor t: its declared dims and strides, or for a dynamic tensor its
 * wildcards set to 3 and compact strides in its declared axis order. 0 when t cannot be given a
 * buffer (no positive layout, too many elements). */
static int layout(hipdnnGraphReader_t* r, const hipdnnGraphTensor_t* t, Buffer* b, long* budget)
{
    uint32_t n = 0, i, axis;
    int64_t order[MAX_RANK], extent = 1, step = 1;
    if(t->rank == 0 || t->rank > MAX_RANK)
        return 0;
    if(hipdnnGraphReaderTensorDims(r, t, b->dims, MAX_RANK, &n) != HIPDNN_PLUGIN_STATUS_SUCCESS
       || hipdnnGraphReaderTensorStrides(r, t, order, MAX_RANK, &n) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return 0;
    b->uid = t->uid;
    b->rank = t->rank;
    b->overridden = t->is_dynamic;
    if(t->is_dynamic)
    {
        for(i = 0; i < t->rank; ++i)
            if(b->dims[i] == -1)
                b->dims[i] = 3;
        /* axis order value k is the k-th innermost axis */
        for(i = 0; i < t->rank; ++i)
        {
            for(axis = 0; axis < t->rank && order[axis] != (int64_t)i; ++axis)
                ;
            if(axis == t->rank)
                return 0;
            b->strides[axis] = step;
            if(b->dims[axis] <= 0 || b->dims[axis] > MAX_ELEMENTS)
                return 0;
            step *= b->dims[axis];
            if(step > MAX_ELEMENTS)
                return 0;
        }
    }
    else
        memcpy(b->strides, order, sizeof(int64_t) * t->rank);
    for(i = 0; i < t->rank; ++i)
    {
        if(b->dims[i] <= 0 || b->dims[i] > MAX_ELEMENTS || b->strides[i] <= 0)
            return 0;
        if(b->dims[i] > 1)
        {
            if(b->strides[i] > MAX_ELEMENTS)
                return 0;
            extent += (b->dims[i] - 1) * b->strides[i];
        }
        if(extent > MAX_ELEMENTS)
            return 0;
    }
    *budget -= (long)extent;
    if(*budget < 0)
        return 0;
    b->bytes = (size_t)extent * element_size(t->data_type);
    return 1;
}

static void fill(void* p, size_t n)
{
    uint8_t* q = (uint8_t*)p;
    size_t i;
    for(i = 0; i < n; ++i)
        q[i] = (uint8_t)(next_random() >> 56);
}

/* Runs the graph once on exact-size heap buffers, when the reader can describe every tensor. */
static void execute(hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t ctx, hipdnnGraphReader_t* r,
                    size_t workspace_size, Counts* c)
{
    Buffer bufs[MAX_TENSORS];
    hipdnnPluginDeviceBuffer_t device[MAX_TENSORS];
    int64_t ov_uids[MAX_TENSORS];
    uint32_t ov_lengths[MAX_TENSORS];
    const int64_t* ov_shapes[MAX_TENSORS];
    const int64_t* ov_strides[MAX_TENSORS];
    uint32_t i, n = 0, n_ov = 0;
    long budget = MAX_ELEMENTS;
    void* workspace = NULL;
    int ok = 1;
    hipdnnPluginStatus_t st;

    if(hipdnnGraphReaderTensorCount(r) > MAX_TENSORS || workspace_size > MAX_WORKSPACE)
    {
        ++c->too_large;
        return;
    }
    for(i = 0; ok && i < hipdnnGraphReaderTensorCount(r); ++i)
    {
        hipdnnGraphTensor_t t;
        if(hipdnnGraphReaderTensor(r, i, &t) != HIPDNN_PLUGIN_STATUS_SUCCESS)
            ok = 0;
        else if(!t.is_virtual)
        {
            Buffer* b = &bufs[n];
            ok = layout(r, &t, b, &budget);
            if(ok)
            {
                b->data = malloc(b->bytes);
                if(b->data == NULL)
                    ok = 0;
                else
                {
                    fill(b->data, b->bytes);
                    device[n].uid = b->uid;
                    device[n].ptr = b->data;
                    if(b->overridden)
                    {
                        ov_uids[n_ov] = b->uid;
                        ov_lengths[n_ov] = b->rank;
                        ov_shapes[n_ov] = b->dims;
                        ov_strides[n_ov] = b->strides;
                        ++n_ov;
                    }
                    ++n;
                }
            }
        }
    }
    if(ok && workspace_size > 0)
    {
        workspace = malloc(workspace_size);
        ok = workspace != NULL;
    }
    if(!ok)
        ++c->too_large;
    else
    {
        if(n_ov > 0)
            st = hipdnnEnginePluginExecuteOpGraphWithOverrides(
                h, ctx, workspace, device, n, n_ov, ov_uids, ov_lengths, ov_shapes, ov_strides);
        else
            st = hipdnnEnginePluginExecuteOpGraph(h, ctx, workspace, device, n);
        if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
            ++c->executed;
        else
            ++c->execute_refused;
    }
    free(workspace);
    for(i = 0; i < n; ++i)
        free(bufs[i].data);
}

static void run_engine(hipdnnEnginePluginHandle_t h, const uint8_t* data, size_t size, hipdnnGraphReader_t* r,
                       int reader_ok, Counts* c)
{
    hipdnnPluginConstData_t graph = {data, size};
    hipdnnPluginConstData_t config = {kConfig, sizeof kConfig};
    hipdnnPluginConstData_t details = {NULL, 0};
    hipdnnEnginePluginExecutionContext_t ctx = NULL;
    int64_t ids[4] = {0, 0, 0, 0};
    uint32_t n = 0;
    size_t ws = 0, ws_ctx = 0;

    if(hipdnnEnginePluginGetApplicableEngineIds(h, &graph, ids, 4, &n) != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        ++c->plugin_errors;
        return;
    }
    if(n == 0)
    {
        ++c->not_applicable;
        return;
    }
    ++c->applicable;
    if(hipdnnEnginePluginGetEngineDetails(h, ids[0], &graph, &details) == HIPDNN_PLUGIN_STATUS_SUCCESS)
        must(hipdnnEnginePluginDestroyEngineDetails(h, &details), "DestroyEngineDetails");
    if(hipdnnEnginePluginGetWorkspaceSize(h, &config, &graph, &ws) != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        ++c->plugin_errors;
        return;
    }
    if(hipdnnEnginePluginCreateExecutionContext(h, &config, &graph, &ctx) != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        ++c->plugin_errors;
        return;
    }
    ++c->contexts;
    if(hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, ctx, &ws_ctx) == HIPDNN_PLUGIN_STATUS_SUCCESS
       && reader_ok)
        execute(h, ctx, r, ws_ctx, c);
    must(hipdnnEnginePluginDestroyExecutionContext(h, ctx), "DestroyExecutionContext");
}

int main(int argc, char** argv)
{
    FILE* in = stdin;
    Counts c;
    hipdnnEnginePluginHandle_t h = NULL;
    uint8_t header[4];

    memset(&c, 0, sizeof c);
    if(argc > 1 && strcmp(argv[1], "-") != 0)
    {
        in = fopen(argv[1], "rb");
        if(in == NULL)
        {
            perror(argv[1]);
            return 2;
        }
    }
    if(hipdnnEnginePluginCreate(&h) != HIPDNN_PLUGIN_STATUS_SUCCESS)
    {
        fprintf(stderr, "asan_harness: hipdnnEnginePluginCreate failed\n");
        return 2;
    }
    while(fread(header, 1, 4, in) == 4)
    {
        const uint32_t size = (uint32_t)header[0] | ((uint32_t)header[1] << 8) | ((uint32_t)header[2] << 16)
                              | ((uint32_t)header[3] << 24);
        /* malloc(0) may return NULL; one byte keeps the pointer valid while size stays 0 */
        uint8_t* data = (uint8_t*)malloc(size > 0 ? size : 1);
        hipdnnGraphReader_t r;
        int reader_ok;
        if(data == NULL || (size > 0 && fread(data, 1, size, in) != size))
        {
            fprintf(stderr, "asan_harness: truncated record %lu\n", c.records);
            free(data);
            return 2;
        }
        ++c.records;
        reader_ok = hipdnnGraphReaderOpen(&r, data, size) == HIPDNN_PLUGIN_STATUS_SUCCESS;
        if(reader_ok)
        {
            ++c.reader_ok;
            walk_reader(&r);
        }
        run_engine(h, data, size, &r, reader_ok, &c);
        free(data);
    }
    if(in != stdin)
        fclose(in);
    must(hipdnnEnginePluginDestroy(h), "Destroy");
    printf("{\"records\": %lu, \"reader_ok\": %lu, \"applicable\": %lu, \"not_applicable\": %lu, "
           "\"plugin_errors\": %lu, \"contexts\": %lu, \"executed\": %lu, \"execute_refused\": %lu, "
           "\"too_large\": %lu}\n",
           c.records, c.reader_ok, c.applicable, c.not_applicable, c.plugin_errors, c.contexts, c.executed,
           c.execute_refused, c.too_large);
    return 0;
}
