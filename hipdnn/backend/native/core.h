// Shared declarations of the compiled execute core (rfcs/0007-native-execute-core.md): the
// configuration, the plan's tensor table, the per-call records, and the functions one unit offers
// the others. Each .cpp file of this folder is one step of the way data flows through a call.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "hipdnn_plugin_sdk/EnginePluginApi.h"
#include "hipdnn_plugin_sdk/PluginApi.h"

// Static type objects name only their head; CPython fills the rest in PyType_Ready.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace hipdnn_core {

using ExecuteFn = decltype(&hipdnnEnginePluginExecuteOpGraph);
using ExecuteOverridesFn = decltype(&hipdnnEnginePluginExecuteOpGraphWithOverrides);
using LastErrorFn = decltype(&hipdnnPluginGetLastErrorString);

// hipdnn ErrorCode values (hipdnn/backend/errors.py)
constexpr int kInvalidValue = 1;
constexpr int kBackendError = 2;
constexpr int kGraphNotSupported = 4;
constexpr int kInvalidVariantPack = 7;

// The largest element a buffer may state (complex128 and float128 are 16 bytes): anything larger is
// a value lying about its type, refused before any arithmetic uses it.
constexpr int64_t kMaxItemsize = 64;

// The most items a snapshot of a caller's iterable takes (support.cpp, snapshot): far above any
// tensor count or rank, and a bound on what an endless iterator can make the core hold.
constexpr Py_ssize_t kMaxSnapshotItems = 1 << 20;

constexpr int kLocationUnknown = 0;
constexpr int kLocationHost = 1;
constexpr int kLocationDevice = 2;

// -- module configuration (set once by hipdnn/backend/execute_core.py) -----------------------------
struct Config {
    PyObject* error_type = nullptr;     // HipdnnError
    PyObject* error_codes = nullptr;    // dict int -> ErrorCode
    PyObject* ndarray_type = nullptr;   // numpy.ndarray
    PyObject* np_integer_type = nullptr;  // numpy.integer (pointers given as numpy ints)
    PyObject* tensor_type = nullptr;    // frontend TensorAttributes (keys of other graphs are named)
    PyObject* entry_type = nullptr;     // OverrideEntry
    PyObject* mapping_abc = nullptr;    // collections.abc.Mapping
    PyObject* resolver = nullptr;       // values.resolve(value, label, stream) -> Resolved
    PyObject* refusal_logger = nullptr;  // called with the message when overrides meet a flag-less graph
    PyObject* torch_test = nullptr;      // values.is_torch_tensor(value) -> bool, asked once per type
    PyObject* torch_dtype_info = nullptr;  // values.torch_dtype_info(dtype) -> (code, name, itemsize)
    PyObject* torch_dtypes = nullptr;    // dict: torch dtype -> (code, name, itemsize), filled as met
    PyObject* torch_modes = nullptr;     // torch._C._is_torch_function_mode_enabled (TorchReadScope)
    PyObject* torch_no_modes = nullptr;  // torch._C.DisableTorchFunction
    PyObject* torch_tensor = nullptr;    // torch.Tensor (its exact instances' accessors are torch's C code)
    PyObject* base_data_ptr = nullptr;   // torch._C.TensorBase's data_ptr, stride and shape, which no
    PyObject* base_stride = nullptr;     // subclass overrides (TorchReadScope::verify reads through them)
    PyObject* base_shape = nullptr;
    bool torch_modes_looked = false;     // torch._C was asked for the two (once torch tensors are met)
    std::unordered_map<PyTypeObject*, bool> torch_types;  // verdicts (types held by strong refs below)
    std::vector<PyObject*> held_types;
    std::vector<std::string> dtype_names;  // by DataType value
    std::vector<int> itemsizes;            // by DataType value (0 = unknown)
    PyObject* str_shape = nullptr;
    PyObject* str_stride = nullptr;
    PyObject* str_name = nullptr;
    PyObject* str_uid = nullptr;
    PyObject* str_dtype = nullptr;
    PyObject* str_is_cuda = nullptr;
    PyObject* str_is_cpu = nullptr;
    PyObject* str_data_ptr = nullptr;
    PyObject* str_stride_fn = nullptr;
};
extern Config g;

// -- small helpers ---------------------------------------------------------------------------
// Inline storage for the common case (a handful of tensors of rank <= 8): no allocation per call.
template <typename T, size_t N>
class SmallVec {
public:
    explicit SmallVec(size_t n = 0) { resize(n); }
    void resize(size_t n) {
        if (n > N) {
            heap_.resize(n);
            data_ = heap_.data();
        } else {
            data_ = inline_;
        }
        size_ = n;
    }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }
    T* data() { return data_; }
    size_t size() const { return size_; }

private:
    T inline_[N] = {};
    std::vector<T> heap_;
    T* data_ = inline_;
    size_t size_ = 0;
};
// -- the tensor table ------------------------------------------------------------------------------
struct TensorSpec {
    int64_t uid = 0;
    std::string name;
    std::string label;  // "tensor 'q' (uid 1)"
    int data_type = 0;
    std::vector<int64_t> dims;     // declared maxima (-1: wildcard of a dynamic tensor)
    std::vector<int64_t> strides;  // declared strides (an axis order for dynamic tensors)
    std::vector<int> outer_first;  // axes, outermost first
    bool is_virtual = false;
    bool is_dynamic = false;
    int64_t max_elements = -1;  // addressed at the declared maximum; -1 when unbounded (wildcards)
    size_t rank() const { return dims.size(); }
};

struct Gate {
    PyObject_HEAD
    std::atomic<int> closed;
};

struct PlanData {
    Gate* gate = nullptr;
    ExecuteFn plain = nullptr;
    ExecuteOverridesFn with_overrides = nullptr;
    LastErrorFn last_error = nullptr;
    hipdnnEnginePluginHandle_t plugin_handle = nullptr;
    hipdnnEnginePluginExecutionContext_t context = nullptr;
    uint64_t workspace_size = 0;
    int location = kLocationUnknown;
    bool override_enabled = false;
    std::string override_refusal;  // why the plugin cannot take overrides ("" = it can)
    std::string graph_name, plugin_name;
    int64_t engine_id = 0;
    std::vector<TensorSpec> tensors;
    std::unordered_map<int64_t, int> by_uid;
    bool has_dynamic = false;
    size_t overridable = 0;  // tensors that are not virtual: no override set or variant pack holds more
    std::atomic<int64_t> inflight{0};
    std::atomic<bool> released{false};
};

struct PlanCore {
    PyObject_HEAD
    PlanData* d;
};

extern thread_local const PlanData* tl_executing;

// -- per-call override set ------------------------------------------------------------------
struct OverrideSet {
    std::vector<int64_t> uids;
    std::vector<int> index;                             // tensor index, -1 unknown
    std::vector<std::vector<int64_t>> shapes, strides;  // inner vectors keep their capacity across calls
    std::vector<PyObject*> keys;  // strong references: the caller's key object when it was a tensor, else null
    size_t n = 0;
    size_t size() const { return n; }
    // `count` entries with null keys; storage from earlier calls is reused.
    void reset(size_t count) {
        clear();
        n = count;
        uids.resize(count);
        index.resize(count);
        keys.assign(count, nullptr);
        if (shapes.size() < count) {
            shapes.resize(count);
            strides.resize(count);
        }
    }
    void hold_key(size_t i, PyObject* key) {
        Py_XINCREF(key);
        Py_XSETREF(keys[i], key);
    }
    // Drops the key references (with the GIL held: never from a destructor, which may run at
    // thread exit without it).
    void clear() {
        for (PyObject*& k : keys) Py_CLEAR(k);
        keys.clear();
        n = 0;
    }
};

// -- node shape rules ------------------------------------------------------------------------
struct Ref {
    int tensor;
    int axis;
};

struct DimExpr {
    enum Kind { kRef, kConst, kBroadcast } kind = kConst;
    Ref ref{0, 0};
    int64_t value = 1;
    std::vector<Ref> refs;       // kBroadcast
    std::vector<int> shapes;     // kBroadcast: tensors named in its message
    std::string message;         // kBroadcast
};

struct Rule {
    enum Kind { kEqual, kMultiple, kOneOrEqual, kProduce } kind = kEqual;
    std::vector<Ref> refs;
    std::vector<int> shapes;     // tensors whose shapes a message names ({s0}, {s1}, {S})
    std::string message;         // template; "" for kProduce of an output (the generic message)
    int tensor = -1;             // kProduce
    std::vector<DimExpr> exprs;  // kProduce
};

struct NodeRules {
    std::string prefix;  // "sdpa node 'attn': "
    std::string name;    // node name, for the produce message
    std::vector<Rule> rules;
};

// Per-call effective dims: pointers into overrides, computed storage or declared dims.
struct Effective {
    std::vector<const int64_t*> dims;
    std::vector<int64_t> computed;
};
// -- variant-pack values ---------------------------------------------------------------------
struct Buf {
    uint64_t ptr = 0;
    bool sized = false;  // false: a bare pointer, unchecked by design
    uint64_t low = 0, high = 0;
    int dtype_code = -2;  // DataType, -1 foreign type, -2 unknown (item size only)
    std::string dtype_name;
    int itemsize = 0;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;  // in elements
    bool strides_known = false;
    bool contiguous = false;  // C-contiguous, starting at `ptr`
    bool on_device = false;
    bool readonly = false;  // accepted for tensors the graph only reads
    // Back to a bare, unknown value, keeping the vectors' storage (a call allocates nothing once warm).
    void reset() {
        ptr = low = high = 0;
        sized = strides_known = contiguous = on_device = readonly = false;
        dtype_code = -2;
        dtype_name.clear();
        itemsize = 0;
        shape.clear();
        strides.clear();
    }
};

// range must not meet any other; inputs may share memory with each other (x + x, matmul(a, a)).
struct Span {
    uint64_t lo = 0, hi = 0;
    int tensor = -1;  // index in the plan's tensor table; -1 for the workspace
    bool written = false;
    // The layout from `lo`, for the exact test when two spans meet: element size and, in elements,
    // dims and strides (positive: the override rules and graph validation make them so). Rank 0: the
    // bytes [lo, hi), every one addressed (the workspace).
    const int64_t* dims = nullptr;
    const int64_t* strides = nullptr;
    uint32_t rank = 0;
    int itemsize = 1;
};

// Appends the span of `bytes` from `ptr` and counts it when written. A range that cannot be memory
// (its size unknown, or running past the end of the address space: only a bare pointer trusted with
struct CallArgs {
    void* workspace = nullptr;
    const hipdnnPluginDeviceBuffer_t* buffers = nullptr;
    uint32_t num_buffers = 0;
    uint32_t num_overrides = 0;
    const int64_t* override_uids = nullptr;
    const uint32_t* lengths = nullptr;
    const int64_t* const* shapes = nullptr;
    const int64_t* const* strides = nullptr;
};
struct ExecutorData {
    PlanCore* plan = nullptr;
    std::unordered_map<PyObject*, int> by_key;  // tensor object -> index (strong refs in `keys`)
    std::vector<PyObject*> keys;
    std::vector<NodeRules> nodes;
    std::vector<size_t> computed_offset;
    size_t computed_size = 0;
    PyObject* stream_source = nullptr;  // the backend handle: its `stream` is read per call
    std::vector<uint8_t> is_output;     // by tensor index: a node writes it (and it is not virtual)
};

struct Executor {
    PyObject_HEAD
    ExecutorData* x;
};
// A call's scratch: the thread's own, or a fresh one for a nested call. Python code runs in the
// middle of a call (a value's __array_interface__, an override value's __index__, a mapping's
// items) and may execute again on this thread; sharing the scratch would hand the outer call's
// plugin the inner call's buffers and shapes.
template <typename S>
class ScratchLease {
public:
    ScratchLease(S& shared, int& depth) : depth_(depth) {
        if (depth_++ == 0) {
            s_ = &shared;
        } else {
            own_.reset(new S());
            s_ = own_.get();
        }
    }
    ~ScratchLease() { --depth_; }
    ScratchLease(const ScratchLease&) = delete;
    ScratchLease& operator=(const ScratchLease&) = delete;
    S& get() { return *s_; }

private:
    int& depth_;
    S* s_ = nullptr;
    std::unique_ptr<S> own_;
};
enum class KeyUse { kOverride, kVariantPack, kBind };

// -- support.cpp: messages, errors, ints --------------------------------------------------------
std::string list_str(const int64_t* v, size_t n);
std::string list_str(const std::vector<int64_t>& v);
std::string py_repr(PyObject* o);
std::string py_str(PyObject* o);
std::string quoted(const std::string& s);
std::nullptr_t raise(int code, const std::string& message);
std::nullptr_t raise_chained(int code, const std::string& message);
std::string dtype_name(int dt);
int itemsize_of(int dt);
bool to_int64(PyObject* o, int64_t* out, const char* what_prefix, const std::string& what);
bool read_ints(PyObject* seq, std::vector<int64_t>& out, const std::string& what);
bool read_exact_ints(PyObject* seq, std::vector<int64_t>& out);
// n exact ints (no Python code runs) into out; false at the first item that is not one or overflows.
bool read_exact_int_items(PyObject* const* items, Py_ssize_t n, int64_t* out);
PyObject* snapshot(PyObject* seq, const std::string& what, const char* of, int code);
bool is_hipdnn_error_pending();
// Any exception pending other than a HipdnnError (an object's own TypeError, OverflowError, ...)
// becomes HipdnnError(code, message: its type and text), chained; interrupts and MemoryError pass.
// Returns false, for `return as_hipdnn_error(...)` on failure paths.
bool as_hipdnn_error(int code, const std::string& message);

// -- values.cpp: reading variant-pack values ---------------------------------------------------
// Values held for one call: strong references and buffer views, dropped (with the GIL) once the
// plugin has returned, so nothing a plugin writes into can be freed or moved under it.
struct Holds {
    std::vector<PyObject*> refs;
    std::vector<Py_buffer> views;  // reserved before the call reads values: never reallocated while held
    void keep(PyObject* o) {
        Py_INCREF(o);
        refs.push_back(o);
    }
    void drop() {
        for (Py_buffer& v : views) PyBuffer_Release(&v);
        views.clear();
        for (PyObject* o : refs) Py_DECREF(o);
        refs.clear();
    }
};
// One call's reads of torch tensors (Graph.execute's variant pack, call_tensors): a tensor's pointer is
// read before the others' and used after them, so no torch function mode may run code in between (a
// mode sees every accessor: its handler could free a tensor already read). At the call's first torch
// tensor, if a mode is active on this thread, torch's DisableTorchFunction is entered until the call
// ends (mode state is per thread; Python code the call runs meanwhile, a resolver's, sees no mode).
// Scopes nest (a foreign object's code may make a call of its own).
//
// Code of the caller's may still run between two reads (a later value's __index__, a resolver, a
// subclass's accessor) and free a tensor read before. So the scope also logs each torch tensor read
// (the object, its pointer, shape and strides), and verify(), called after the call's last Python
// code and before the plugin, reads them again through torch.Tensor's own C accessors, with modes
// and __torch_function__ off, where no one's code runs: a tensor that moved, shrank or was freed is
// refused, naming it, and nothing runs.
struct TorchReadScope {
    TorchReadScope();
    ~TorchReadScope();
    TorchReadScope(const TorchReadScope&) = delete;
    TorchReadScope& operator=(const TorchReadScope&) = delete;
    // Reads every logged tensor again (see above): false, with a HipdnnError raised, if any changed.
    bool verify();
    PyObject* entered = nullptr;  // the DisableTorchFunction context, while entered
    bool checked = false;
    size_t first;  // this scope's entries of the thread's log start here
    TorchReadScope* outer;
};
// Called before a torch tensor's accessors are read: enters the scope's DisableTorchFunction where a
// mode is active (once per scope; nothing outside a scope). False with an exception set on failure.
bool torch_reads_begin();
// Logs a torch tensor the current scope read (rank > kLoggedRank: its pointer alone). label must
// outlive the scope.
void torch_reads_log(PyObject* t, const char* label, uint64_t ptr, const int64_t* shape, const int64_t* strides,
                     size_t rank);

bool read_value(PyObject* value, const std::string& label, uint64_t stream, Buf& b, std::vector<PyObject*>& releases,
                Holds& holds);
bool buffer_from_record(PyObject* r, const std::string& label, Buf& b);
PyObject* dtype_record(PyObject* dtype);
void run_releases(std::vector<PyObject*>& releases);

// -- extent.cpp: extent and overlap proofs ------------------------------------------------------
bool addressed_elements(const int64_t* dims, const int64_t* strides, size_t rank, int64_t* out);
bool layout_overlaps(const int64_t* dims, const int64_t* strides, const int* outer_first, size_t rank);
bool layout_overlaps(const int64_t* dims, const int64_t* strides, size_t rank);
bool addressed_bytes(int dt, const int64_t* dims, const int64_t* strides, size_t rank, int fallback_itemsize,
                     int64_t* out);
bool check_buffer(const Buf& b, const std::string& where, int dt, const int64_t* dims, const int64_t* strides,
                  size_t rank, bool overridden, int64_t* extent = nullptr);
// Span of `bytes` from `ptr` with its layout (rank 0: all bytes); false when it is no range of the
// address space (its size unknown, or running past its end).
bool span_at(uint64_t ptr, int64_t bytes, int tensor, bool written, const int64_t* dims, const int64_t* strides,
             uint32_t rank, int itemsize, Span* out);
void add_span(std::vector<Span>& spans, size_t* written, const Span& sp);
// Whether some byte is addressed by both layouts (exact; see extent.cpp for the search and its budget).
bool layouts_meet(const Span& a, const Span& b);
// Finds two spans, one written, that address a common byte; false when there are none.
bool find_alias(Span* spans, size_t n, size_t written, Span* first, Span* second);
// The bound call's check for a few tensors, straight from its slot arrays (no spans stored).
bool check_alias_few(const PlanData& d, const hipdnnPluginDeviceBuffer_t* buffers, const int64_t* bytes,
                     const int* tensor, const uint8_t* written, const int64_t* const* dims,
                     const int64_t* const* strides, const uint32_t* ranks, const int* itemsizes,
                     const size_t* written_slots, size_t n_written, size_t n, uint64_t ws, uint64_t ws_size);
std::nullptr_t raise_alias(const PlanData& d, const Span& written, const Span& other);

// -- keys.cpp: variant-pack and override keys --------------------------------------------------
bool resolve_key(const ExecutorData& x, PyObject* key, KeyUse use, int64_t* uid, int* index, PyObject** tensor_key);
bool is_mapping(PyObject* o);
// A key known without running Python code: one of the graph's tensor objects or an exact int.
bool resolve_key_fast(const ExecutorData& x, PyObject* key, int64_t* uid, int* index, PyObject** tensor_key);

// -- overrides.cpp: lowering the overrides and rules 1-8 ---------------------------------------
bool check_entry(const TensorSpec& t, int64_t uid, const int64_t* shape, size_t shape_n, const int64_t* stride,
                 size_t stride_n, bool bound_to_declared, bool output = false, int64_t* elements = nullptr);
bool check_overrides(const PlanData& d, OverrideSet& o, bool bound, const uint8_t* is_output);
bool lower_overrides(const ExecutorData& x, PyObject* o_uids, PyObject* o_shapes, PyObject* o_strides, PyObject* map,
                     OverrideSet& o);
bool refuse_flagless(const PlanData& d);
bool check_override_count(const PlanData& d, size_t count, const char* what);

// -- shape_rules.cpp: the nodes' shape rules on the call's shapes -------------------------------
bool parse_rules(PyObject* spec, std::vector<NodeRules>& nodes, const PlanData& d);
bool check_effective(const ExecutorData& x, const OverrideSet& o, Effective& e);

// -- dispatch.cpp: the guarded plugin call ------------------------------------------------------
bool enter(PlanData& d);
bool call_plugin(PlanData& d, const CallArgs& a);

// -- the Python types (plan.cpp, executor.cpp, binding.cpp) and their set-up in module.cpp -------
extern PyTypeObject GateType, PlanCoreType, ExecutorType, BindingType;
bool ready_plan_types();
bool ready_executor_type();
bool ready_binding_type();
bool ready(PyTypeObject& t, const char* name, size_t size, destructor dealloc, newfunc new_fn, PyMethodDef* methods,
           PyGetSetDef* getset);
PyObject* Executor_bind(PyObject* self, PyObject* args);

// -- binding.cpp, for calls read elsewhere (sdpa_calls.cpp) ----------------------------------------
bool is_binding(PyObject* o);
// The bound call of `binding` (every slot bound as an override) with, per pointer slot, its address
// and its rank-ranks[i] shape and strides already read: Py_True it ran; Py_False nothing launched (a
// tensor exceeds its declared maximum: the caller needs a larger plan); nullptr with the error raised.
PyObject* call_bound_read(PyObject* binding, size_t n, const uint64_t* ptrs, const int64_t* const* shapes,
                          const int64_t* const* strides, const size_t* ranks, uint64_t ws);
uint64_t bound_workspace_size(PyObject* binding);
// -- sdpa_calls.cpp ---------------------------------------------------------------------------------
extern PyTypeObject SdpaCallsType;
bool ready_sdpa_calls_type();
PyObject* mod_thread_workspace(PyObject* self, PyObject* arg);

}  // namespace hipdnn_core
