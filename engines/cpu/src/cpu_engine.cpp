// hipdnn CPU engine plugin: graph parsing into an execution plan, workspace layout and per-call
// shape inference, on the plugin SDK's C++ layer (hipdnn_plugin_sdk/cpp/), which writes the C entry
// points, caches plans, binds device buffers and checks each call's overrides. Each op is a module
// (op_*.cpp) found through the table below; the compute kernels live in cpu_kernels.cpp and friends.

#include "engine_plan.hpp"

#include <hipdnn_plugin_sdk/cpp/Ragged.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace hipdnn_cpu;

namespace
{

constexpr int64_t kEngineId = 101;

// Every op the engine serves, by wire node type.
const OpDesc* const kOps[] = {
    &kSdpaFwdOp, &kMatmulOp, &kPointwiseOp, &kSdpaBwdOp, &kRmsNormOp, &kLayerNormOp, &kReductionOp};

const OpDesc* find_op(wire::NodeAttributes type)
{
    for(const OpDesc* op : kOps)
        if(op->type == type)
            return op;
    return nullptr;
}

// Reads one tensor table. Returns "" or why the engine cannot use it.
std::string read_tensor(const wire::TensorAttributes* t, TensorInfo& out)
{
    if(t == nullptr)
        return "the graph has a null tensor entry";
    out.uid = t->uid();
    out.is_virtual = t->virtual_();
    out.dynamic = t->is_dynamic();
    out.ragged_uid = sdk::ragged_offset_uid(*t);
    const auto dt = t->data_type();
    if(out.is_virtual && dt != wire::DataType::FLOAT && dt != wire::DataType::UNSET)
        return format("virtual tensor uid %lld has data type %s; only FLOAT intermediates are supported",
                      static_cast<long long>(out.uid),
                      wire::EnumNameDataType(dt));
    if(!out.is_virtual && !to_dtype(dt, out.dt))
        return format("tensor uid %lld has data type %s; FLOAT, HALF, BFLOAT16, INT32 and INT64 are supported",
                      static_cast<long long>(out.uid),
                      wire::EnumNameDataType(dt));
    const auto* dims = t->dims();
    const auto* strides = t->strides();
    // The FlatBuffers verifier checks the alignment of a vector's length word only; dims and strides
    // are read in place as int64, so a damaged buffer could otherwise hand us misaligned elements.
    for(const auto* v : {dims, strides})
        if(v != nullptr && reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) != 0)
            return format("tensor uid %lld: its dims or strides are not 8-byte aligned in the graph buffer",
                          static_cast<long long>(out.uid));
    const uint32_t rank = dims ? dims->size() : 0;
    if(t->value_type() != wire::TensorValue::NONE)
    {
        const auto* fv = t->value_as_Float32Value();
        if(out.dynamic)
            return format("by-value tensor uid %lld is marked dynamic", static_cast<long long>(out.uid));
        if(fv == nullptr || out.is_virtual)
            return format("tensor uid %lld: only FLOAT by-value scalars are supported",
                          static_cast<long long>(out.uid));
        out.by_value = true;
        out.value = fv->value();
        out.dt = DType::F32; // the value is carried as a float whatever the declared type
        out.has_dims = true;
        out.declared.rank = rank == 0 ? 1 : static_cast<int>(std::min<uint32_t>(rank, kMaxRank));
        for(int i = 0; i < out.declared.rank; ++i)
        {
            out.declared.dims[i] = rank == 0 ? 1 : dims->Get(i);
            if(out.declared.dims[i] != 1)
                return format("by-value tensor uid %lld must have every dim equal to 1",
                              static_cast<long long>(out.uid));
            out.declared.strides[i] = 1;
        }
        return "";
    }
    if(rank == 0)
    {
        if(out.is_virtual)
            return "";
        return format("tensor uid %lld has no dims", static_cast<long long>(out.uid));
    }
    if(rank > static_cast<uint32_t>(kMaxRank))
        return format("tensor uid %lld has rank %u; at most %d is supported",
                      static_cast<long long>(out.uid),
                      rank,
                      kMaxRank);
    out.has_dims = true;
    out.declared.rank = static_cast<int>(rank);
    for(uint32_t i = 0; i < rank; ++i)
    {
        out.declared.dims[i] = dims->Get(i);
        if(out.dynamic && out.declared.dims[i] == -1)
        {
            out.wild = true; // given at every execute, unbounded
            continue;
        }
        if(out.declared.dims[i] <= 0)
            return format("tensor uid %lld has a non-positive dim%s",
                          static_cast<long long>(out.uid),
                          out.declared.dims[i] == -1 ? " (a wildcard, but the tensor is not marked dynamic)" : "");
        // No tensor can address more (extent() says so for static ones); a dynamic tensor's declared
        // maximum would otherwise reach the tile arithmetic unbounded.
        if(out.declared.dims[i] > kMaxExtent)
            return format("tensor uid %lld: dim %u is %lld, more than the %lld elements any tensor may address",
                          static_cast<long long>(out.uid),
                          i,
                          static_cast<long long>(out.declared.dims[i]),
                          static_cast<long long>(kMaxExtent));
    }
    if(out.is_virtual)
    {
        if(!out.wild)
            set_compact(out.declared); // declared strides of virtual tensors are ignored
        return out.wild || extent(out.declared) >= 0
                   ? ""
                   : format("tensor uid %lld is too large", static_cast<long long>(out.uid));
    }
    if(out.dynamic)
    {
        // The strides are an axis order: a permutation of 0..rank-1, 0 for the innermost axis.
        // Element strides arrive with every execute (the override), so none are kept here.
        if(strides == nullptr || strides->size() != rank)
            return format("dynamic tensor uid %lld: its axis order and dims differ in length",
                          static_cast<long long>(out.uid));
        bool seen[kMaxRank] = {};
        for(uint32_t i = 0; i < rank; ++i)
        {
            const int64_t o = strides->Get(i);
            if(o < 0 || o >= static_cast<int64_t>(rank) || seen[o])
                return format("dynamic tensor uid %lld: strides are not an axis order (a permutation of 0..%u)",
                              static_cast<long long>(out.uid),
                              rank - 1);
            seen[o] = true;
            out.outer_first[rank - 1 - o] = static_cast<int>(i);
            out.declared.strides[i] = 0;
        }
        return "";
    }
    else
    {
        if(strides == nullptr || strides->size() != rank)
            return format("tensor uid %lld: strides and dims differ in length", static_cast<long long>(out.uid));
        for(uint32_t i = 0; i < rank; ++i)
        {
            out.declared.strides[i] = strides->Get(i);
            if(out.declared.strides[i] <= 0)
                return format("tensor uid %lld has a non-positive stride", static_cast<long long>(out.uid));
        }
    }
    if(extent(out.declared) < 0)
        return format("tensor uid %lld is too large", static_cast<long long>(out.uid));
    return "";
}

// Resolves each tensor's ragged offset (TensorInfo::ragged), or says why the graph is not
// applicable: the offsets are a static INT32 / INT64 input, the ragged tensor a static input or
// output. Which roles may be ragged is each op's to say.
std::string resolve_ragged(Plan& plan)
{
    for(TensorInfo& ti : plan.tensors)
    {
        if(ti.ragged_uid < 0)
            continue;
        const long long uid = static_cast<long long>(ti.uid), ou = static_cast<long long>(ti.ragged_uid);
        ti.ragged = plan.find(ti.ragged_uid);
        if(ti.ragged < 0)
            return format("tensor uid %lld: its ragged offset uid %lld is no tensor of the graph", uid, ou);
        const TensorInfo& o = plan.tensors[ti.ragged];
        if(ti.is_virtual || ti.by_value || ti.dynamic || ti.declared.rank != 4)
            return format("tensor uid %lld: a ragged tensor must be a static, rank-4 input or output", uid);
        if(o.is_virtual || o.by_value || o.dynamic || o.ragged_uid >= 0)
            return format("tensor uid %lld: its ragged offset uid %lld must be a static input given at execute",
                          uid,
                          ou);
        if(o.dt != DType::I32 && o.dt != DType::I64)
            return format("tensor uid %lld: its ragged offset uid %lld has data type %s; INT32 or INT64 is needed",
                          uid,
                          ou,
                          dtype_name(o.dt));
    }
    return "";
}

// Gives every virtual tensor with a wildcard-dependent size a place (TensorInfo::alias), or
// says why the graph is not applicable. See build_plan.
std::string place_wildcard_intermediates(Plan& plan, const std::vector<Shape>& eff)
{
    const size_t nt = plan.tensors.size();
    std::vector<int> readers(nt, 0), reader(nt, -1), first_read(nt, -1);
    for(size_t ni = 0; ni < plan.nodes.size(); ++ni)
    {
        const std::array<int, 22> reads = node_reads(plan.nodes[ni]);
        for(size_t i = 0; i < reads.size(); ++i)
        {
            const int t = reads[i];
            bool repeat = t < 0;
            for(size_t j = 0; !repeat && j < i; ++j)
                repeat = reads[j] == t; // unary pointwise lists its input twice
            if(repeat)
                continue;
            ++readers[t];
            reader[t] = static_cast<int>(ni);
            if(first_read[t] < 0)
                first_read[t] = static_cast<int>(ni);
        }
    }
    std::vector<int> aliased_input(plan.nodes.size(), -1);
    for(size_t ni = plan.nodes.size(); ni-- > 0;)
    {
        for(int t : node_writes(plan.nodes[ni]))
        {
            if(t < 0 || !plan.tensors[t].is_virtual || !has_wildcard(eff[t]))
                continue;
            TensorInfo& ti = plan.tensors[t];
            const char* why = nullptr;
            int target = -1;
            const int c = reader[t];
            if(readers[t] != 1)
                why = readers[t] == 0 ? "nothing reads it" : "more than one node reads it";
            else if(!plan.nodes[c].kind->in_place)
                why = "its consumer is not a pointwise node";
            else
            {
                const int x = plan.nodes[c].out[0];
                target = plan.tensors[x].is_virtual ? plan.tensors[x].alias : x;
                if(target < 0)
                    why = "its consumer's output is itself an intermediate that cannot hold it";
                else if(aliased_input[c] >= 0 && aliased_input[c] != t)
                    why = "its consumer already keeps another intermediate in its output";
                else if(first_read[target] >= 0 && first_read[target] <= plan.tensors[target].producer)
                    why = "the output it would live in is read before it is produced";
                else if(!dims_match(eff[t], eff[x]))
                    why = "its consumer broadcasts it to a different shape";
            }
            if(why != nullptr)
                return format("intermediate tensor uid %lld has wildcard dims %s, so the workspace cannot be sized "
                              "for it, and it cannot be kept in an output buffer either (%s); declare it "
                              "non-virtual or give the dims it depends on",
                              static_cast<long long>(ti.uid),
                              shape_str(eff[t]).c_str(),
                              why);
            ti.alias = target;
            aliased_input[c] = t;
        }
    }
    return "";
}


// Builds the execution plan of a verified graph. Returns "" when the engine
// can compute every node exactly, else the reason it is not applicable.
std::string build_plan(const wire::Graph& g, Plan& plan, int threads, Threading threading)
{
    DType io_dt;
    if(!(dtype_ok(g.io_data_type()) || to_dtype(g.io_data_type(), io_dt)) || !dtype_ok(g.intermediate_data_type())
       || !dtype_ok(g.compute_data_type()))
        return "graph-level intermediate / compute data types other than FLOAT are not supported";
    if(g.name())
        plan.name = g.name()->str();
    const auto* tensors = g.tensors();
    const auto* nodes = g.nodes();
    if(tensors == nullptr || tensors->size() == 0)
        return "the graph has no tensors";
    if(nodes == nullptr || nodes->size() == 0)
        return "the graph has no nodes";

    plan.tensors.resize(tensors->size());
    for(uint32_t i = 0; i < tensors->size(); ++i)
    {
        std::string why = read_tensor(tensors->Get(i), plan.tensors[i]);
        if(!why.empty())
            return why;
        plan.by_uid.emplace_back(plan.tensors[i].uid, static_cast<int>(i));
    }
    std::sort(plan.by_uid.begin(), plan.by_uid.end());
    for(size_t i = 1; i < plan.by_uid.size(); ++i)
        if(plan.by_uid[i].first == plan.by_uid[i - 1].first)
            return format("tensor uid %lld appears twice", static_cast<long long>(plan.by_uid[i].first));
    if(std::string why = resolve_ragged(plan); !why.empty())
        return why;

    plan.nodes.resize(nodes->size());
    for(uint32_t ni = 0; ni < nodes->size(); ++ni)
    {
        const wire::Node* n = nodes->Get(ni);
        NodeInfo& node = plan.nodes[ni];
        if(n == nullptr)
            return "the graph has a null node entry";
        node.name = n->name() ? n->name()->str() : ("node" + std::to_string(ni));
        if(!dtype_ok(n->compute_data_type()))
            return format("node '%s': compute data type %s is not supported",
                          node.name.c_str(),
                          wire::EnumNameDataType(n->compute_data_type()));

        TensorRefs refs{plan, node.name, {}};
        const OpDesc* op = find_op(n->attributes_type());
        if(op == nullptr)
            return format("node '%s': operation type %d is not supported",
                          node.name.c_str(),
                          static_cast<int>(n->attributes_type()));
        if(n->attributes() == nullptr)
            return format("node '%s' has no attributes", node.name.c_str());
        node.kind = op;
        if(std::string bad = op->read(*n, plan, node, refs); !bad.empty())
            return bad;
        if(!refs.why.empty())
            return refs.why;
        if(op != &kSdpaFwdOp && op != &kSdpaBwdOp)
        {
            int bad = -1;
            for(int x : node.in)
                bad = x >= 0 && plan.tensors[x].ragged >= 0 ? x : bad;
            for(int x : node.out)
                bad = x >= 0 && plan.tensors[x].ragged >= 0 ? x : bad;
            if(bad >= 0)
                return format("node '%s' (%s): tensor uid %lld is ragged; only SDPA's q, k, v, o, stats (and the "
                              "backward's dO, dQ, dK, dV) may be",
                              node.name.c_str(),
                              op->name,
                              static_cast<long long>(plan.tensors[bad].uid));
        }

        // Data flow: virtual inputs must come from an earlier node, each tensor
        // is written once, and no node reads what it writes.
        const std::array<int, 22> reads = node_reads(node);
        for(int t : reads)
        {
            if(t < 0)
                continue;
            TensorInfo& ti = plan.tensors[t];
            if(ti.is_virtual && ti.producer < 0)
                return format("node '%s' reads virtual tensor uid %lld before any node produces it",
                              node.name.c_str(),
                              static_cast<long long>(ti.uid));
            ti.used = true;
        }
        for(int o : node_writes(node))
        {
            if(o < 0)
                continue;
            for(int t : reads)
                if(t == o)
                    return format("node '%s' reads and writes tensor uid %lld",
                                  node.name.c_str(),
                                  static_cast<long long>(plan.tensors[o].uid));
            TensorInfo& to = plan.tensors[o];
            if(to.by_value)
                return format("node '%s' writes by-value tensor uid %lld",
                              node.name.c_str(),
                              static_cast<long long>(to.uid));
            if(to.producer == static_cast<int>(ni))
                return format("node '%s' names tensor uid %lld as two of its outputs",
                              node.name.c_str(),
                              static_cast<long long>(to.uid));
            if(to.producer >= 0)
                return format("tensor uid %lld is produced by more than one node", static_cast<long long>(to.uid));
            to.producer = static_cast<int>(ni);
            to.used = true;
        }
        if(node.out[1] >= 0 && node.out[1] == node.out[0])
            return format("node '%s': o and stats are the same tensor", node.name.c_str());
    }
    // A ragged tensor's offsets are read whenever it is.
    for(TensorInfo& ti : plan.tensors)
        if(ti.ragged >= 0 && ti.used)
            plan.tensors[ti.ragged].used = true;

    // Dynamic tensors are served by every node kind: each kernel's scratch is sized from tile
    // sizes and declared head dims only (sdpa_bwd refuses wildcard head dims in infer_sdpa_bwd),
    // norms and reductions need none, and every shape rule below treats -1 as "equal to anything".

    // Shapes at the declared (maximum) sizes.
    std::vector<Shape> eff(plan.tensors.size());
    for(size_t t = 0; t < plan.tensors.size(); ++t)
        eff[t] = plan.tensors[t].declared;
    ShapeError err{};
    for(const NodeInfo& node : plan.nodes)
        if(!node.kind->infer(plan, node, true, eff.data(), err))
            return err.msg;

    // A virtual tensor whose size depends on a wildcard cannot be given a workspace slot (the
    // workspace is sized once, and nothing is allocated on the execute path). The one case served
    // is an intermediate read only by a pointwise node whose output has its shape: it is then kept
    // in that output's buffer, which the consumer updates in place (elementwise, same index read
    // and written), following chains of such pointwise nodes to a non-virtual output. Anything
    // else is not applicable. Visiting producers last-first resolves a chain from its end.
    if(const std::string why = place_wildcard_intermediates(plan, eff); !why.empty())
        return why;

    size_t off = 0;
    for(size_t t = 0; t < plan.tensors.size(); ++t)
    {
        TensorInfo& ti = plan.tensors[t];
        if(!ti.is_virtual)
            continue;
        if(ti.producer < 0)
            continue; // declared but never used: nothing to place
        if(ti.has_dims && !dims_match(ti.declared, eff[t]))
            return format("virtual tensor uid %lld is declared %s but its producer gives %s",
                          static_cast<long long>(ti.uid),
                          shape_str(ti.declared).c_str(),
                          shape_str(eff[t]).c_str());
        if(ti.alias >= 0)
            continue; // stored in a non-virtual output's buffer
        if(extent(eff[t]) < 0)
            return format("virtual tensor uid %lld is too large", static_cast<long long>(ti.uid));
        ti.capacity = elements(eff[t]);
        ti.ws_offset = off;
        off += align_up(static_cast<size_t>(ti.capacity) * sizeof(float));
    }
    // Per-batch (ragged / paged) nodes: their checked offsets, tables and gathered K/V.
    for(NodeInfo& node : plan.nodes)
    {
        node.aux_offset = off;
        off += align_up(node.aux_bytes);
    }

    // Scratch is per-thread tiles whose size each op caps, so wildcard dims are sized at the cap.
    size_t per_thread = 0;
    for(NodeInfo& node : plan.nodes)
    {
        std::string why;
        node.scratch_per_thread = node.kind->scratch ? node.kind->scratch(node, eff.data(), &why) : 0;
        if(!why.empty())
            return why;
        per_thread = std::max(per_thread, node.scratch_per_thread);
    }
    plan.threads_set = threads > 0;
    plan.nthreads = plan.threads_set ? threads : max_threads();
#ifdef _OPENMP
    plan.threading = threading;
#else
    plan.threading = Threading::Pool; // no OpenMP team in this build (the plan says so)
    (void)threading;
#endif
    if(std::string why = isa_for_plan(plan.isa); !why.empty())
        return why;
    if(std::string why = panel_vectors_for_plan(plan.panel_vectors); !why.empty())
        return why;
    plan.scratch_offset = off;
    plan.scratch_per_thread = per_thread;
    const size_t total = off + per_thread * static_cast<size_t>(plan.nthreads);
    plan.workspace_size = total == 0 ? 0 : total + kAlign; // slack to align the caller's pointer
    for(const TensorInfo& ti : plan.tensors)
    {
        sdk::DeclaredTensor d;
        d.uid = ti.uid;
        d.label = format("tensor uid %lld", static_cast<long long>(ti.uid));
        d.binding = ti.is_virtual ? sdk::Binding::Virtual : ti.by_value ? sdk::Binding::Value : sdk::Binding::Buffer;
        d.needs_buffer = ti.used;
        d.shape = ti.declared;
        d.dynamic = ti.dynamic;
        std::copy(ti.outer_first, ti.outer_first + kMaxRank, d.outer_first);
        d.wildcard_max = kMaxExtent; // offsets stay far from int64 overflow
        d.max_extent_log2 = 48;      // kMaxExtent
        plan.declared.push_back(std::move(d));
    }
    plan.seal();
    return "";
}

std::string describe(const Plan& plan)
{
    std::string s = format("engine %lld, graph '%s': %zu node(s):",
                           static_cast<long long>(kEngineId),
                           plan.name.c_str(),
                           plan.nodes.size());
    for(const NodeInfo& n : plan.nodes)
    {
        s += " " + n.name + "=" + n.kind->name;
        if(n.kind->describe)
            n.kind->describe(plan, n, s);
    }
    s += format("; workspace %zu bytes, %d thread(s) (%s), isa %s, sdpa panels of up to %d vectors", plan.workspace_size,
                plan.nthreads, plan.threading == Threading::OpenMP ? "OpenMP team" : "worker pool", isa_name(plan.isa),
                plan.panel_vectors);
    return s;
}

// One call, after the layer bound its buffers and checked its overrides: call.ptrs and call.shapes
// (indexed like plan.tensors) hold the call's memory and shapes; virtual tensors get theirs here.
void run(const Plan& plan, sdk::Call& call)
{
    Shape* eff = call.shapes;
    void** ptrs = call.ptrs;
    void* workspace = call.workspace;
    const size_t nt = plan.tensors.size();
    for(size_t t = 0; t < nt; ++t)
        if(plan.tensors[t].by_value)
            ptrs[t] = const_cast<float*>(&plan.tensors[t].value); // read only

    // Resolve every node's shapes before any node runs, so a bad call writes nothing.
    ShapeError err{};
    for(const NodeInfo& node : plan.nodes)
        if(!node.kind->infer(plan, node, false, eff, err))
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, err.msg);
    // The workspace was sized once; a call that would need more scratch is refused, never overrun.
    for(const NodeInfo& node : plan.nodes)
    {
        const size_t need = node.kind->scratch ? node.kind->scratch(node, eff, nullptr) : 0;
        if(need > plan.scratch_per_thread)
            bad_param("node '%s': this call needs %zu bytes of scratch per thread, more than the %zu the "
                      "workspace was sized for",
                      node.name.c_str(),
                      need,
                      plan.scratch_per_thread);
    }

    char* base = nullptr;
    if(plan.workspace_size > 0)
    {
        const uintptr_t p = reinterpret_cast<uintptr_t>(workspace);
        base = reinterpret_cast<char*>((p + kAlign - 1) / kAlign * kAlign);
    }
    for(size_t t = 0; t < nt; ++t)
        if(plan.tensors[t].is_virtual && plan.tensors[t].producer >= 0)
            ptrs[t] = plan.tensors[t].alias >= 0 ? ptrs[plan.tensors[t].alias] : base + plan.tensors[t].ws_offset;
    char* scratch = base ? base + plan.scratch_offset : nullptr;
    // Scratch was sized for plan.nthreads. A plan built with the CPU_THREADS knob uses that many;
    // otherwise fewer if the caller lowered the OpenMP thread count since.
    const int nthreads = plan.threads_set ? plan.nthreads : std::max(1, std::min(plan.nthreads, max_threads()));

    const RunArgs args{ptrs, eff, scratch, nthreads, plan.isa, plan.panel_vectors, base, plan.threading};
    // Data-dependent checks (ragged offsets, page tables) of every node, before any node writes: a
    // later node's bad offsets must not leave an earlier node's outputs written.
    for(const NodeInfo& node : plan.nodes)
        if(node.kind->check != nullptr)
            node.kind->check(plan, node, args);
    for(const NodeInfo& node : plan.nodes)
        if(!node.kind->run(plan, node, args))
            fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
                 "node '" + node.name + "': scratch space smaller than the kernel needs");
}

// The engine as the SDK layer sees it. It keeps no state of its own: plans are cached by the layer,
// per handle, and a call's storage lives in its execution context.
struct CpuEngine
{
    using Plan = hipdnn_cpu::Plan;
    static constexpr int64_t kEngineIds[] = {kEngineId};
    static constexpr const char* kName = "hipdnn_cpu_engine";
    static constexpr const char* kApiVersion = "1.6.0"; // ragged / paged (0012), softcap (0013), FP8 fwd / bwd (0014)
    static constexpr const char* kVersion = HIPDNN_VERSION;
    static constexpr bool kOverrideEntry = true;

    // CPU_THREADS (hipdnn.Handle(cpu_threads=N)): the threads a call of the plan uses, its workspace
    // sized for them; 0, the default: OMP_NUM_THREADS, else every core the process may run on.
    // CPU_THREADING (hipdnn.Handle(cpu_threading=...)): where the SDPA forward's items run (Threading:
    // 0 the engine's worker pool, 1 the OpenMP team; every other op runs on the OpenMP team).
    static constexpr int64_t kMaxThreads = 1024;
    static std::vector<sdk::IntKnob> knobs(int64_t)
    {
        return {{"CPU_THREADS", "threads a call uses (0: OMP_NUM_THREADS, else every core)", 0, 0, kMaxThreads},
                {"CPU_THREADING", "where the SDPA forward runs (0: the engine's worker pool, 1: the OpenMP team)", 0, 0, 1}};
    }

    std::string plan(int64_t, const sdk::GraphView& g, Plan& out, const sdk::KnobValues& knobs) const
    {
        return build_plan(g.graph, out, static_cast<int>(knobs.at(0)), static_cast<Threading>(knobs.at(1)));
    }

    size_t workspace_size(int64_t, const Plan& p) const { return p.workspace_size; }

    // Tensors and workspace are host memory.
    std::vector<int32_t> behavior_notes(int64_t) const { return {HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT}; }

    std::string describe(int64_t, const Plan& p) const { return ::describe(p); }

    void execute(const Plan& p, sdk::Call& call) const { run(p, call); }
};

} // namespace

HIPDNN_CPP_PLUGIN(CpuEngine)
