// hipdnn HIP engine: what the kernels of engines 201 and 202 assume of a call, as rules the host
// checks before anything is launched. Plain C++ (no GPU code), shared by the engine's host code
// (hip_engine.cpp), the kernel choice of the tensor-core tier (sdpa_tc_dispatch.hip, sdpa_bwd.hip)
// and a host-only test (tests/test_hip_call_rules.py), so each rule is written once.
//
// The host applies them twice: to the graph's declared shapes when it plans (a graph that breaks
// one is not applicable, and the reason is the plugin's answer), and to every call's effective
// shapes and pointers (a call that breaks one fails with BAD_PARAM and its reason; nothing runs).
// Overrides may shrink any dim, the head dim included, and give any strides, so a plan built for
// a served shape can still be handed a call that is not: the per-call check is what keeps such a
// call from a kernel compiled for another shape.
//
// What every kernel family assumes, and where it is enforced:
//  * head dims up to 128 (compile-time D = 64 or 128 in sdpa_portable, sdpa_ws, sdpa_decode and the
//    backward's kernels; a launcher picks D = kernel_head_dim(d, dv) and every load and store stops
//    at the tensor's own head dim; the mma.sync and wgmma kernels, which do not, are only chosen for
//    d == dv == 64 or 128): head_dim_rule, at plan (engine 202: multiples of 8) and per call;
//  * base pointers aligned to their elements (2 bytes for bf16 / fp16 rows, 4 for fp32 stats and
//    int32 lengths; the portable kernels load and store single elements): tensor_rules, per call;
//  * every element of a written tensor at its own address (o, stats, dQ, dK, dV): tensor_rules,
//    at plan and per call; the host's execute core checks the same and more (no byte shared with
//    another tensor), but a plugin is also called through its C ABI directly;
//  * the tensor-core path: head-dim stride 1, batch / head / row strides multiples of 8 elements
//    and 16-byte aligned bases (TMA boxes, cp.async 16-byte copies, 16-byte and 4-byte stores):
//    rows_vec16. Not a refusal: a call that breaks it runs the portable kernels (any strides).
#ifndef HIPDNN_HIP_ENGINE_SDPA_CALL_RULES_H
#define HIPDNN_HIP_ENGINE_SDPA_CALL_RULES_H

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hipdnn_hip
{

// The head dims served (of q and k, and of v and o, each on its own: d_qk may differ from d_v).
// Every kernel is compiled for head dims 64 and 128 and runs a smaller one padded to the next of
// them (kernel_head_dim in sdpa_kernels.h: the columns past a tensor's head dim are loaded as zeros
// and never stored). The portable kernels (engine 201) load and store single elements: any head dim
// from 1 to kMaxHeadDim. The tensor-core kernels (engine 202) move 16-byte chunks of a row: multiples
// of 8. Above 128 no kernel is compiled.
constexpr int64_t kMaxHeadDim = 128;

enum class HeadDims
{
    Any,      // 1 .. kMaxHeadDim: engine 201, and every call (a call of engine 202 whose head dim is
              // not a multiple of 8 runs the portable kernels, as unaligned strides do)
    Multiple8 // 8 .. kMaxHeadDim in steps of 8: what engine 202 plans for
};

constexpr bool head_dim_served(int64_t d, HeadDims served)
{
    return d >= 1 && d <= kMaxHeadDim && (served == HeadDims::Any || d % 8 == 0);
}

// "" when the kernels serve head dim d, else the reason ("head dim 136 not served (1-128)"); which
// names the tensors ("head dim" of q and k, "v head dim" of v and o).
inline std::string head_dim_rule(int64_t d, HeadDims served, const char* which = "head dim")
{
    if(head_dim_served(d, served))
        return "";
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s %lld not served (%s)", which, static_cast<long long>(d),
                  served == HeadDims::Any ? "1-128" : "8-128 in steps of 8");
    return buf;
}

// Whether two distinct indices of a rank-4 layout (dims d, element strides s, all positive) can
// address one element. Axes of extent 1 place nothing. Taken from the innermost stride out, each
// axis must step past every element the axes inside it span: a sufficient test, so a layout that
// interleaves axes without ever colliding but fails it counts as overlapping (a refusal, never a
// missed collision). Padded rows, permuted axes and packed [B, S, 3, H, D] buffers pass.
inline bool layout_overlaps(const int64_t d[4], const int64_t s[4])
{
    int order[4] = {0, 1, 2, 3};
    std::sort(order, order + 4, [&](int a, int b) { return s[a] < s[b] || (s[a] == s[b] && a > b); });
    int64_t span = 1; // elements the axes taken so far reach, from the first: last offset + 1
    for(int i : order)
    {
        if(d[i] <= 1)
            continue;
        if(s[i] < span)
            return true;
        // (d - 1) * s + span, saturated: past 2^62 elements no memory holds the layout anyway
        const int64_t lim = int64_t(1) << 62;
        if(s[i] > lim / d[i])
            span = lim;
        else
            span = std::min(lim, (d[i] - 1) * s[i] + span);
    }
    return false;
}

// One tensor as the rules see it: its role (for messages), dims and element strides, base address
// (0 while planning: no pointer yet), element size, and whether the node writes it.
struct RuleTensor
{
    const char* name = "";
    int64_t d[4] = {1, 1, 1, 1};
    int64_t s[4] = {1, 1, 1, 1};
    uintptr_t addr = 0;
    int64_t elem_bytes = 2;
    bool written = false;
};

// "" or the first rule the tensors break: each base aligned to its element, each written tensor's
// elements at distinct addresses.
inline std::string tensor_rules(const RuleTensor* t, int n)
{
    char buf[256];
    for(int i = 0; i < n; ++i)
    {
        const RuleTensor& x = t[i];
        if(x.addr % static_cast<uintptr_t>(x.elem_bytes) != 0)
        {
            std::snprintf(buf, sizeof buf, "%s at address 0x%llx is not aligned to its %lld-byte elements", x.name,
                          static_cast<unsigned long long>(x.addr), static_cast<long long>(x.elem_bytes));
            return buf;
        }
        if(x.written && layout_overlaps(x.d, x.s))
        {
            std::snprintf(buf, sizeof buf,
                          "%s [%lld,%lld,%lld,%lld] with strides [%lld,%lld,%lld,%lld] writes some element "
                          "address twice (its strides overlap)",
                          x.name, static_cast<long long>(x.d[0]), static_cast<long long>(x.d[1]),
                          static_cast<long long>(x.d[2]), static_cast<long long>(x.d[3]),
                          static_cast<long long>(x.s[0]), static_cast<long long>(x.s[1]),
                          static_cast<long long>(x.s[2]), static_cast<long long>(x.s[3]));
            return buf;
        }
    }
    return "";
}

// The tensor-core kernels' row path for one bf16 / fp16 [B, H, S, D] tensor with strides
// {sb, sh, ss, sd} (elements) at addr: unit head-dim stride, the other strides multiples of 8
// elements (16 bytes) and a 16-byte aligned base.
inline bool rows_vec16(int64_t sb, int64_t sh, int64_t ss, int64_t sd, const void* addr)
{
    return sd == 1 && sb % 8 == 0 && sh % 8 == 0 && ss % 8 == 0 && (reinterpret_cast<uintptr_t>(addr) & 15u) == 0;
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_CALL_RULES_H
