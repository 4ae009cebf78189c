// The compiled execute path (rfcs/0007-native-execute-core.md).
//
// Graph.execute, the bound call and the backend's descriptor execute all end here. Everything a
// call is checked against is frozen when the plan is built (the tensors as the serialized graph
// told the plugin, the plugin entries, the node shape rules), so a call only reads the caller's
// values, checks each rule once and calls the plugin with the GIL released.
//
// Objects:
//   Gate      one per backend handle: closed once, refused by every call after.
//   PlanCore  one per execution plan: plugin entries, context, tensor table, in-flight count.
//   Executor  one per built Graph: the keys (tensor objects) and node shape rules over a PlanCore.
//   Binding   one per Graph.bind: pointer order and override uids resolved once.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hipdnn_plugin_sdk/EnginePluginApi.h"
#include "hipdnn_plugin_sdk/PluginApi.h"

// Static type objects name only their head; CPython fills the rest in PyType_Ready.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

using ExecuteFn = decltype(&hipdnnEnginePluginExecuteOpGraph);
using ExecuteOverridesFn = decltype(&hipdnnEnginePluginExecuteOpGraphWithOverrides);
using LastErrorFn = decltype(&hipdnnPluginGetLastErrorString);

// hipdnn ErrorCode values (hipdnn/backend/errors.py)
constexpr int kInvalidValue = 1;
constexpr int kBackendError = 2;
constexpr int kGraphNotSupported = 4;
constexpr int kInvalidVariantPack = 7;

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
Config g;

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

std::string list_str(const int64_t* v, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) {
        if (i) s += ", ";
        s += std::to_string(v[i]);
    }
    return s + "]";
}

std::string list_str(const std::vector<int64_t>& v) { return list_str(v.data(), v.size()); }

std::string py_repr(PyObject* o) {
    PyObject* r = PyObject_Repr(o);
    if (!r) {
        PyErr_Clear();
        return "<unrepresentable>";
    }
    const char* c = PyUnicode_AsUTF8(r);
    std::string s = c ? c : "<unrepresentable>";
    if (!c) PyErr_Clear();
    Py_DECREF(r);
    return s;
}

std::string py_str(PyObject* o) {
    PyObject* r = PyObject_Str(o);
    if (!r) {
        PyErr_Clear();
        return "<unprintable>";
    }
    const char* c = PyUnicode_AsUTF8(r);
    std::string s = c ? c : "<unprintable>";
    if (!c) PyErr_Clear();
    Py_DECREF(r);
    return s.size() > 200 ? s.substr(0, 197) + "..." : s;
}

std::string quoted(const std::string& s) {
    PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (!u) {
        PyErr_Clear();
        return "'" + s + "'";
    }
    std::string r = py_repr(u);
    Py_DECREF(u);
    return r;
}

// A plugin's last error as it may appear in an exception: at most 4096 bytes read (marked when cut),
// ASCII controls, DEL and the C1 controls (UTF-8 C2 80..9F) written as escapes, so a plugin cannot
// move a terminal's cursor or forge a log line (the host's rule for plugin strings, rfcs/0008).
// Runs with the GIL released: plain C++ only.
std::string printable_message(const char* text) {
    constexpr size_t kCap = 4096;
    size_t n = strnlen(text, kCap + 1);
    const bool cut = n > kCap;
    if (cut) n = kCap;
    std::string out;
    out.reserve(n + 32);
    char esc[8];
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            out += esc;
        } else if (c == 0xc2 && i + 1 < n && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
            std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(text[i + 1]));
            out += esc;
            ++i;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (cut) out += "... [truncated at 4096 bytes]";
    return out;
}

std::nullptr_t raise(int code, const std::string& message) {
    PyObject* key = PyLong_FromLong(code);
    PyObject* code_obj = (g.error_codes && key) ? PyDict_GetItemWithError(g.error_codes, key) : nullptr;
    Py_XDECREF(key);
    if (!code_obj || !g.error_type) {
        PyErr_SetString(PyExc_RuntimeError, message.c_str());
        return nullptr;
    }
    PyObject* msg = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
    if (!msg) return nullptr;
    PyObject* exc = PyObject_CallFunctionObjArgs(g.error_type, code_obj, msg, nullptr);
    Py_DECREF(msg);
    if (!exc) return nullptr;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
    Py_DECREF(exc);
    return nullptr;
}

// raise(), keeping the exception pending now (a caller's object failed) as the new error's __cause__.
std::nullptr_t raise_chained(int code, const std::string& message) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type) {
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value) PyException_SetTraceback(value, tb);
    }
    std::string full = message;
    if (value) full += " (" + std::string(reinterpret_cast<PyTypeObject*>(type)->tp_name) + ": " + py_str(value) + ")";
    raise(code, full);
    if (value) {
        PyObject *t2, *v2, *tb2;
        PyErr_Fetch(&t2, &v2, &tb2);
        PyErr_NormalizeException(&t2, &v2, &tb2);
        if (v2) {
            Py_INCREF(value);
            PyException_SetCause(v2, value);  // steals the reference
            Py_INCREF(value);
            PyException_SetContext(v2, value);  // steals the reference
        }
        PyErr_Restore(t2, v2, tb2);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return nullptr;
}

std::string dtype_name(int dt) {
    if (dt >= 0 && static_cast<size_t>(dt) < g.dtype_names.size()) return g.dtype_names[static_cast<size_t>(dt)];
    return "DataType(" + std::to_string(dt) + ")";
}

int itemsize_of(int dt) {
    if (dt >= 0 && static_cast<size_t>(dt) < g.itemsizes.size()) return g.itemsizes[static_cast<size_t>(dt)];
    return 0;
}

// A Python int (not bool) or numpy integer -> int64. Returns false with a HipdnnError set.
bool to_int64(PyObject* o, int64_t* out, const char* what_prefix, const std::string& what) {
    if (PyLong_CheckExact(o) || (PyLong_Check(o) && !PyBool_Check(o))) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            raise(kInvalidValue, std::string(what_prefix) + what + " holds " + py_repr(o) + ", outside the int64 range");
            return false;
        }
        if (v == -1 && PyErr_Occurred()) return false;
        *out = v;
        return true;
    }
    if (!PyBool_Check(o) && PyIndex_Check(o)) {
        PyObject* idx = PyNumber_Index(o);
        if (!idx) {
            raise_chained(kInvalidValue, std::string(what_prefix) + what + " holds " + py_repr(o) +
                                             ", whose __index__ failed");
            return false;
        } else {
            bool ok = to_int64(idx, out, what_prefix, what);
            Py_DECREF(idx);
            return ok;
        }
    }
    raise(kInvalidValue, std::string(what_prefix) + what + " must hold ints, got " + py_repr(o));
    return false;
}

// Read a sequence of ints into `out`. Returns false with HipdnnError set.
bool read_ints(PyObject* seq, std::vector<int64_t>& out, const std::string& what) {
    if (PyUnicode_Check(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq)) {
        raise(kInvalidValue, what + " must be a sequence of ints, got " + py_repr(seq));
        return false;
    }
    PyObject* fast = PySequence_Fast(seq, "");
    if (!fast) {
        PyErr_Clear();
        raise(kInvalidValue, what + " must be a sequence of ints, got " + py_repr(seq));
        return false;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject** items = PySequence_Fast_ITEMS(fast);
    out.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!to_int64(items[i], &out[static_cast<size_t>(i)], "", what)) {
            Py_DECREF(fast);
            return false;
        }
    }
    Py_DECREF(fast);
    return true;
}

// Elements addressed from the base pointer: sum((d - 1) * s) + 1, without overflow. Dims >= 1 and
// strides >= 1 are checked before. False when the sum leaves int64.
bool addressed_elements(const int64_t* dims, const int64_t* strides, size_t rank, int64_t* out) {
    int64_t total = 1;
    for (size_t i = 0; i < rank; ++i) {
        int64_t span = 0;
        if (__builtin_mul_overflow(dims[i] - 1, strides[i], &span)) return false;
        if (__builtin_add_overflow(total, span, &total)) return false;
    }
    *out = total;
    return true;
}

// Whether two distinct indices of a strided layout can address the same element. `outer_first` lists
// the axes by non-increasing stride. A layout passes when every axis of size > 1 steps over all that
// the axes inside it span: stride >= 1 + sum over inner axes of stride * (dim - 1). That is exact for
// nested layouts (row-major, permuted, padded) and conservative for interleaved ones: it refuses
// dims [3, 2] with strides [2, 3], whose six offsets happen to be distinct. O(rank).
bool layout_overlaps(const int64_t* dims, const int64_t* strides, const int* outer_first, size_t rank) {
    int64_t span = 1;  // one past the furthest element the inner axes reach
    for (size_t k = rank; k-- > 0;) {
        size_t a = static_cast<size_t>(outer_first[k]);
        if (dims[a] <= 1) continue;
        if (strides[a] < span) return true;
        int64_t step = 0;
        if (__builtin_mul_overflow(strides[a], dims[a] - 1, &step) || __builtin_add_overflow(span, step, &span))
            span = INT64_MAX;  // beyond any memory: every further axis of size > 1 overlaps
    }
    return false;
}

// The same for strides in any order: sorted first, O(rank log rank).
bool layout_overlaps(const int64_t* dims, const int64_t* strides, size_t rank) {
    std::vector<int> order(rank);
    for (size_t a = 0; a < rank; ++a) order[a] = static_cast<int>(a);
    std::stable_sort(order.begin(), order.end(), [strides](int x, int y) {
        return strides[static_cast<size_t>(x)] > strides[static_cast<size_t>(y)];
    });
    return layout_overlaps(dims, strides, order.data(), rank);
}

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
    std::atomic<int64_t> inflight{0};
    std::atomic<bool> released{false};
};

struct PlanCore {
    PyObject_HEAD
    PlanData* d;
};

thread_local const PlanData* tl_executing = nullptr;

// -- per-call override set ------------------------------------------------------------------
struct OverrideSet {
    std::vector<int64_t> uids;
    std::vector<int> index;  // tensor index, -1 unknown
    std::vector<std::vector<int64_t>> shapes, strides;
    std::vector<PyObject*> keys;  // borrowed: the caller's key object when it was a tensor
    size_t size() const { return uids.size(); }
    void clear() {
        uids.clear();
        index.clear();
        shapes.clear();
        strides.clear();
        keys.clear();
    }
};

// Rules 4-8 of spec 4.2.1 for one entry (rules 2-3 are the caller's), plus, for the bound path where
// pointers are trusted to back the declared maximum, the memory bound. An output (`output`) must
// also address each element once: rule 8 leaves its axes in the declared order, which makes that a
// single pass. `elements`, when given, receives the elements the override addresses (bound path).
// Messages are the API's.
bool check_entry(const TensorSpec& t, int64_t uid, const int64_t* shape, size_t shape_n,
                 const int64_t* stride, size_t stride_n, bool bound_to_declared, bool output = false,
                 int64_t* elements = nullptr) {
    size_t rank = t.rank();
    if (shape_n != rank || stride_n != rank) {
        raise(kInvalidValue, "rule 4 (rank mismatch): " + t.label + " has rank " + std::to_string(rank) +
                                 ", override gives " + std::to_string(shape_n) + " dims and " +
                                 std::to_string(stride_n) + " strides");
        return false;
    }
    for (size_t i = 0; i < rank; ++i) {
        if (shape[i] <= 0) {
            raise(kInvalidValue, "rule 5 (positive shape): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " has a value <= 0");
            return false;
        }
    }
    for (size_t i = 0; i < rank; ++i) {
        if (stride[i] <= 0) {
            raise(kInvalidValue, "rule 6 (positive stride): uid " + std::to_string(uid) + " override stride " +
                                     list_str(stride, rank) + " has a value <= 0");
            return false;
        }
    }
    for (size_t i = 0; i < rank; ++i) {
        if (t.dims[i] != -1 && shape[i] > t.dims[i]) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " exceeds the declared maximum " + list_str(t.dims) +
                                     " at axis " + std::to_string(i));
            return false;
        }
    }
    int64_t previous = INT64_MAX;
    for (int axis : t.outer_first) {
        if (shape[axis] == 1) continue;
        if (stride[axis] > previous) {
            raise(kInvalidValue, "rule 8 (stride order): uid " + std::to_string(uid) + " override strides " +
                                     list_str(stride, rank) + " reorder the declared layout " + list_str(t.strides));
            return false;
        }
        previous = stride[axis];
    }
    if (output && layout_overlaps(shape, stride, t.outer_first.data(), rank)) {
        raise(kInvalidValue, "uid " + std::to_string(uid) + " (" + quoted(t.name) + ") override shape " +
                                 list_str(shape, rank) + " with strides " + list_str(stride, rank) +
                                 " maps distinct elements to one address; a node writes this tensor, so each "
                                 "element needs its own memory");
        return false;
    }
    if (bound_to_declared) {
        int64_t elems = 0;
        if (!addressed_elements(shape, stride, rank, &elems)) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " with strides " + list_str(stride, rank) +
                                     " addresses more elements than int64 can count");
            return false;
        }
        if (t.max_elements >= 0 && elems > t.max_elements) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " with strides " + list_str(stride, rank) + " addresses " +
                                     std::to_string(elems) + " elements, more than the " +
                                     std::to_string(t.max_elements) + " its declared maximum " + list_str(t.dims) +
                                     " with strides " + list_str(t.strides) +
                                     " addresses (a bound call trusts its pointers to that much memory)");
            return false;
        }
        if (elements) *elements = elems;
    }
    return true;
}

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

std::string shape_of(const PlanData& d, const Effective& e, int t) {
    return list_str(e.dims[static_cast<size_t>(t)], d.tensors[static_cast<size_t>(t)].rank());
}

std::string render(const std::string& tpl, const PlanData& d, const Effective& e, const std::vector<int64_t>& values,
                   const std::vector<int>& shapes, const std::string& want) {
    std::string out;
    for (size_t i = 0; i < tpl.size(); ++i) {
        char c = tpl[i];
        if (c != '{') {
            out += c;
            continue;
        }
        size_t close = tpl.find('}', i);
        if (close == std::string::npos) {
            out += tpl.substr(i);
            break;
        }
        std::string key = tpl.substr(i + 1, close - i - 1);
        if (key == "S") {
            out += "[";
            for (size_t k = 0; k < shapes.size(); ++k) {
                if (k) out += ", ";
                out += shape_of(d, e, shapes[k]);
            }
            out += "]";
        } else if (key == "want") {
            out += want;
        } else if (!key.empty() && key[0] == 's') {
            size_t k = static_cast<size_t>(std::atoi(key.c_str() + 1));
            out += k < shapes.size() ? shape_of(d, e, shapes[k]) : "?";
        } else {
            size_t k = static_cast<size_t>(std::atoi(key.c_str()));
            out += k < values.size() ? std::to_string(values[k]) : "?";
        }
        i = close;
    }
    return out;
}

int64_t value_of(const Effective& e, Ref r) { return e.dims[static_cast<size_t>(r.tensor)][r.axis]; }

bool run_rules(const PlanData& d, const std::vector<NodeRules>& nodes, const std::vector<size_t>& computed_offset,
               Effective& e) {
    std::vector<int64_t> values;
    SmallVec<int64_t, 16> produced;
    for (const NodeRules& node : nodes) {
        for (const Rule& rule : node.rules) {
            values.clear();
            for (Ref r : rule.refs) values.push_back(value_of(e, r));
            bool ok = true;
            switch (rule.kind) {
                case Rule::kEqual:
                    for (int64_t v : values) ok = ok && v == values[0];
                    break;
                case Rule::kMultiple:
                    ok = values[1] != 0 && values[0] % values[1] == 0;
                    break;
                case Rule::kOneOrEqual:
                    ok = values[0] == 1 || values[0] == values[1];
                    break;
                case Rule::kProduce: {
                    const TensorSpec& t = d.tensors[static_cast<size_t>(rule.tensor)];
                    produced.resize(rule.exprs.size());
                    for (size_t a = 0; a < rule.exprs.size(); ++a) {
                        const DimExpr& x = rule.exprs[a];
                        if (x.kind == DimExpr::kConst) {
                            produced[a] = x.value;
                        } else if (x.kind == DimExpr::kRef) {
                            produced[a] = value_of(e, x.ref);
                        } else {
                            int64_t out = 1;
                            for (Ref r : x.refs) {
                                int64_t v = value_of(e, r);
                                if (v == 1) continue;
                                if (out == 1) {
                                    out = v;
                                } else if (v != out) {
                                    raise(kInvalidValue, node.prefix + render(x.message, d, e, {}, x.shapes, ""));
                                    return false;
                                }
                            }
                            produced[a] = out;
                        }
                    }
                    if (t.is_virtual) {
                        int64_t* dst = e.computed.data() + computed_offset[static_cast<size_t>(rule.tensor)];
                        std::copy(produced.data(), produced.data() + produced.size(), dst);
                        e.dims[static_cast<size_t>(rule.tensor)] = dst;
                        continue;
                    }
                    const int64_t* have = e.dims[static_cast<size_t>(rule.tensor)];
                    for (size_t a = 0; a < produced.size(); ++a) ok = ok && have[a] == produced[a];
                    if (!ok) {
                        std::string want = list_str(produced.data(), produced.size());
                        if (rule.message.empty()) {
                            raise(kInvalidValue, t.label + " has shape " + list_str(have, t.rank()) +
                                                     " for this call, but node " + quoted(node.name) + " produces " +
                                                     want + " from its inputs' shapes");
                        } else {
                            raise(kInvalidValue, node.prefix + render(rule.message, d, e, values, rule.shapes, want));
                        }
                        return false;
                    }
                    continue;
                }
            }
            if (!ok) {
                raise(kInvalidValue, node.prefix + render(rule.message, d, e, values, rule.shapes, ""));
                return false;
            }
        }
    }
    return true;
}

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
    bool contiguous = false;
    bool on_device = false;
};

// numpy's buffer-protocol format -> (DataType, name); only native byte order.
bool dtype_from_format(const char* fmt, Py_ssize_t itemsize, int* code, std::string* name) {
    if (!fmt) fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') ++fmt;  // '<' is native on the platforms we build for
    if (fmt[0] == '\0' || fmt[1] != '\0') return false;
    switch (fmt[0]) {
        case 'f': *code = 1; *name = "float32"; return itemsize == 4;
        case 'e': *code = 2; *name = "float16"; return itemsize == 2;
        case 'd': *code = 4; *name = "float64"; return itemsize == 8;
        case 'B': *code = 5; *name = "uint8"; return itemsize == 1;
        case 'b': *code = 7; *name = "int8"; return itemsize == 1;
        case 'i': case 'l': case 'q':
            if (itemsize == 4) { *code = 6; *name = "int32"; return true; }
            if (itemsize == 8) { *code = 15; *name = "int64"; return true; }
            return false;
        case 'h': *code = -1; *name = "int16"; return itemsize == 2;
        case 'H': *code = -1; *name = "uint16"; return itemsize == 2;
        case 'I': case 'L': case 'Q':
            *code = -1; *name = "uint" + std::to_string(itemsize * 8); return true;
        case '?': *code = -1; *name = "bool"; return true;
        case 'g': *code = -1; *name = "float128"; return true;
        default: return false;
    }
}

// numpy ndarray through the buffer protocol. Returns 1 done, 0 not handled (caller resolves in
// Python), -1 error set.
int buffer_from_ndarray(PyObject* value, const std::string& label, Buf& b) {
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return 0;
    }
    if (view.readonly) {
        PyBuffer_Release(&view);
        raise(kInvalidVariantPack, label + ": array is read-only");
        return -1;
    }
    int code = 0;
    std::string name;
    if (!dtype_from_format(view.format, view.itemsize, &code, &name)) {
        PyBuffer_Release(&view);
        return 0;
    }
    b.sized = true;
    b.ptr = reinterpret_cast<uint64_t>(view.buf);
    b.dtype_code = code;
    b.dtype_name = name;
    b.itemsize = static_cast<int>(view.itemsize);
    size_t nd = static_cast<size_t>(view.ndim);
    b.shape.assign(view.shape, view.shape + nd);
    b.strides.resize(nd);
    b.strides_known = true;
    bool any_zero = false;
    int64_t low = 0, high = 0, expect = view.itemsize;
    bool c_contig = true;
    for (size_t i = nd; i-- > 0;) {
        int64_t s = view.strides[i], dim = view.shape[i];
        if (dim == 0) any_zero = true;
        if (s % view.itemsize != 0) b.strides_known = false;
        b.strides[i] = s / view.itemsize;
        int64_t span = (dim - 1) * s;
        if (span < 0) low += span; else high += span;
        if (dim != 1 && s != expect) c_contig = false;
        expect *= dim;
    }
    if (any_zero) {
        b.low = b.high = b.ptr;
    } else {
        b.low = b.ptr + static_cast<uint64_t>(low);
        b.high = b.ptr + static_cast<uint64_t>(high) + static_cast<uint64_t>(view.itemsize);
    }
    b.contiguous = c_contig && b.low == b.ptr;
    PyBuffer_Release(&view);
    return 1;
}

bool pointer_from_int(PyObject* value, const std::string& label, Buf& b) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    unsigned long long u = 0;
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(value);
        if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
            PyErr_Clear();
            raise(kInvalidVariantPack, label + ": pointer " + py_repr(value) + " is not a valid address");
            return false;
        }
    } else if (overflow < 0 || v <= 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        raise(kInvalidVariantPack, label + ": pointer " + py_repr(value) + " is not a valid address");
        return false;
    } else {
        u = static_cast<unsigned long long>(v);
    }
    b.ptr = u;
    b.sized = false;
    return true;
}

// A Resolved record (hipdnn.backend.values.Resolved: ptr, low, high, dtype code, dtype name, item size,
// shape, element strides or None, contiguous, on device, release) -> Buf.
bool buffer_from_record(PyObject* r, const std::string& label, Buf& b) {
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 11) {
        PyErr_SetString(PyExc_TypeError, "a Resolved record has 11 fields");
        return false;
    }
    b.sized = true;
    b.ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 0));
    b.low = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 1));
    b.high = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 2));
    b.dtype_code = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(r, 3)));
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 4));
    b.dtype_name = name ? name : "";
    b.itemsize = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(r, 5)));
    if (PyErr_Occurred() || !read_ints(PyTuple_GET_ITEM(r, 6), b.shape, label + ": shape")) return false;
    PyObject* strides = PyTuple_GET_ITEM(r, 7);
    b.strides_known = strides != Py_None;
    if (b.strides_known && !read_ints(strides, b.strides, label + ": strides")) return false;
    b.contiguous = PyObject_IsTrue(PyTuple_GET_ITEM(r, 8)) == 1;
    b.on_device = PyObject_IsTrue(PyTuple_GET_ITEM(r, 9)) == 1;
    return !PyErr_Occurred();
}

// A value the core does not read itself goes through hipdnn.backend.values.resolve.
bool buffer_from_resolver(PyObject* value, const std::string& label, uint64_t stream, Buf& b,
                          std::vector<PyObject*>& releases) {
    PyObject* lab = PyUnicode_FromStringAndSize(label.data(), static_cast<Py_ssize_t>(label.size()));
    if (!lab) return false;
    PyObject* st = PyLong_FromUnsignedLongLong(stream);
    PyObject* r = st ? PyObject_CallFunctionObjArgs(g.resolver, value, lab, st, nullptr) : nullptr;
    Py_DECREF(lab);
    Py_XDECREF(st);
    if (!r) return false;
    bool ok = buffer_from_record(r, label, b);
    // the release runs even when the record was unusable: a consumed capsule must be freed
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 11 && PyTuple_GET_ITEM(r, 10) != Py_None) {
        Py_INCREF(PyTuple_GET_ITEM(r, 10));
        releases.push_back(PyTuple_GET_ITEM(r, 10));
    }
    Py_DECREF(r);
    return ok;
}

// Whether values of this type are torch tensors: asked of Python once per type, then cached here.
int is_torch(PyObject* value) {
    if (!g.torch_test) return 0;
    PyTypeObject* tp = Py_TYPE(value);
    auto it = g.torch_types.find(tp);
    if (it != g.torch_types.end()) return it->second ? 1 : 0;
    PyObject* r = PyObject_CallOneArg(g.torch_test, value);
    if (!r) return -1;
    int verdict = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (verdict < 0) return -1;
    if (g.torch_types.size() < 4096) {
        Py_INCREF(reinterpret_cast<PyObject*>(tp));
        g.held_types.push_back(reinterpret_cast<PyObject*>(tp));
        g.torch_types[tp] = verdict != 0;
    }
    return verdict;
}

// A torch tensor through its accessors (torch refuses __cuda_array_interface__ for bfloat16, and CPU
// tensors have no array interface). Returns 1 done, 0 not handled (Python resolves it), -1 error.
int buffer_from_torch(PyObject* value, Buf& b) {
    PyObject* dtype = PyObject_GetAttr(value, g.str_dtype);
    if (!dtype) return -1;
    PyObject* info = PyDict_GetItemWithError(g.torch_dtypes, dtype);  // borrowed
    if (!info) {
        if (PyErr_Occurred()) {
            Py_DECREF(dtype);
            return -1;
        }
        PyObject* fresh = PyObject_CallOneArg(g.torch_dtype_info, dtype);
        if (!fresh || PyDict_SetItem(g.torch_dtypes, dtype, fresh) != 0) {
            Py_XDECREF(fresh);
            Py_DECREF(dtype);
            return -1;
        }
        Py_DECREF(fresh);
        info = PyDict_GetItem(g.torch_dtypes, dtype);
    }
    Py_DECREF(dtype);
    long code, itemsize;
    const char* name;
    if (!info || !PyArg_ParseTuple(info, "lsl", &code, &name, &itemsize)) return -1;
    PyObject* cuda = PyObject_GetAttr(value, g.str_is_cuda);
    int on_device = cuda ? PyObject_IsTrue(cuda) : -1;
    Py_XDECREF(cuda);
    if (on_device < 0) return -1;
    if (!on_device) {
        PyObject* cpu = PyObject_GetAttr(value, g.str_is_cpu);
        int host = cpu ? PyObject_IsTrue(cpu) : -1;
        Py_XDECREF(cpu);
        if (host <= 0) {
            PyErr_Clear();
            return 0;  // another device (or an old torch): Python names the problem
        }
    }
    PyObject* ptr = PyObject_CallMethodNoArgs(value, g.str_data_ptr);
    if (!ptr) return -1;
    b.ptr = PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    if (PyErr_Occurred()) return -1;
    PyObject* shape = PyObject_GetAttr(value, g.str_shape);
    bool ok = shape && read_ints(shape, b.shape, "torch tensor shape");
    Py_XDECREF(shape);
    if (!ok) return -1;
    PyObject* strides = PyObject_CallMethodNoArgs(value, g.str_stride_fn);
    ok = strides && read_ints(strides, b.strides, "torch tensor strides");
    Py_XDECREF(strides);
    if (!ok || b.strides.size() != b.shape.size()) return ok ? 0 : -1;
    b.sized = true;
    b.on_device = on_device != 0;
    b.dtype_code = static_cast<int>(code);
    b.dtype_name = name;
    b.itemsize = static_cast<int>(itemsize > 0 ? itemsize : 1);
    b.strides_known = true;
    int64_t low = 0, high = 0, expect = 1;
    bool c_contig = true, empty = false;
    for (size_t i = b.shape.size(); i-- > 0;) {
        int64_t dim = b.shape[i], st = b.strides[i];
        if (dim == 0) empty = true;
        int64_t span = (dim - 1) * st * b.itemsize;
        if (span < 0) low += span; else high += span;
        if (dim != 1 && st != expect) c_contig = false;
        expect *= dim;
    }
    if (empty) {
        b.low = b.high = b.ptr;
    } else {
        b.low = b.ptr + static_cast<uint64_t>(low);
        b.high = b.ptr + static_cast<uint64_t>(high) + static_cast<uint64_t>(b.itemsize);
    }
    b.contiguous = c_contig && b.low == b.ptr;
    return 1;
}

bool read_value(PyObject* value, const std::string& label, uint64_t stream, Buf& b, std::vector<PyObject*>& releases) {
    if (PyLong_Check(value) && !PyBool_Check(value)) return pointer_from_int(value, label, b);
    if (g.ndarray_type && PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(g.ndarray_type))) {
        int done = buffer_from_ndarray(value, label, b);
        if (done != 0) return done > 0;
    } else if (g.np_integer_type && PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(g.np_integer_type))) {
        PyObject* idx = PyNumber_Index(value);
        if (!idx) return false;
        bool ok = pointer_from_int(idx, label, b);
        Py_DECREF(idx);
        return ok;
    } else {
        int torch = is_torch(value);
        if (torch < 0) return raise_chained(kInvalidVariantPack, label + ": cannot tell what kind of buffer it is"), false;
        if (torch) {
            int done = buffer_from_torch(value, b);
            if (done < 0) {
                // a hostile or broken tensor: let the Python reader name what failed
                PyErr_Clear();
                b = Buf();
            } else if (done > 0) {
                return true;
            }
        }
    }
    return buffer_from_resolver(value, label, stream, b, releases);
}

// Bytes a tensor of data type `dt` addresses from its pointer at dims/strides (dims and strides >= 1);
// false when that leaves int64. An unknown element size counts as `fallback_itemsize`.
bool addressed_bytes(int dt, const int64_t* dims, const int64_t* strides, size_t rank, int fallback_itemsize,
                     int64_t* out) {
    int itemsize = itemsize_of(dt);
    if (!itemsize) itemsize = fallback_itemsize > 0 ? fallback_itemsize : 1;
    int64_t elems = 0;
    return addressed_elements(dims, strides, rank, &elems) && !__builtin_mul_overflow(elems, int64_t{itemsize}, out);
}

// Can `b` back a tensor of data type `dt` at dims/strides? (dtype exact, layout, extent). `extent`,
// when given, receives the bytes the tensor addresses from the pointer (of a checked buffer).
bool check_buffer(const Buf& b, const std::string& where, int dt, const int64_t* dims, const int64_t* strides,
                  size_t rank, bool overridden, int64_t* extent = nullptr) {
    if (!b.sized) return true;
    if (b.dtype_code == -2) {
        int want = itemsize_of(dt);
        if (want && b.itemsize != want) {
            raise(kInvalidValue, where + ": buffer item size " + std::to_string(b.itemsize) + " disagrees with " +
                                     dtype_name(dt));
            return false;
        }
    } else if (b.dtype_code != dt) {
        raise(kInvalidValue, where + ": buffer dtype " + b.dtype_name + " disagrees with " + dtype_name(dt));
        return false;
    }
    bool same_shape = b.shape.size() == rank && std::equal(b.shape.begin(), b.shape.end(), dims);
    if (same_shape) {
        if (b.strides_known) {
            for (size_t i = 0; i < rank; ++i) {
                if (dims[i] > 1 && b.strides[i] != strides[i]) {
                    raise(kInvalidValue, where + ": buffer strides " + list_str(b.strides) +
                                             " disagree with tensor strides " + list_str(strides, rank));
                    return false;
                }
            }
        }
    } else if (!(overridden && b.contiguous)) {
        raise(kInvalidValue, where + ": buffer shape " + list_str(b.shape) + " disagrees with tensor dims " +
                                 list_str(dims, rank) +
                                 (overridden ? " (a differently shaped backing buffer must be contiguous)" : ""));
        return false;
    }
    int64_t need = 0;
    if (!addressed_bytes(dt, dims, strides, rank, b.itemsize, &need)) {
        raise(kInvalidValue, where + ": dims " + list_str(dims, rank) + " with strides " + list_str(strides, rank) +
                                 " address more bytes than int64 can count");
        return false;
    }
    uint64_t end = 0;
    if (b.ptr < b.low || __builtin_add_overflow(b.ptr, static_cast<uint64_t>(need), &end) || end > b.high) {
        raise(kInvalidValue, where + ": addresses " + std::to_string(need) + " bytes at dims " +
                                 list_str(dims, rank) + " strides " + list_str(strides, rank) +
                                 ", but the buffer holds " + std::to_string(b.high > b.ptr ? b.high - b.ptr : 0) +
                                 " bytes from its pointer");
        return false;
    }
    if (extent) *extent = need;
    return true;
}

// -- aliasing -----------------------------------------------------------------------------------
// The memory one tensor (or the workspace) takes in a call: [lo, hi) from its pointer to the last
// byte its shape and strides address. Outputs of nodes (and the workspace) are written, so their
// range must not meet any other; inputs may share memory with each other (x + x, matmul(a, a)).
struct Span {
    uint64_t lo = 0, hi = 0;
    int tensor = -1;  // index in the plan's tensor table; -1 for the workspace
    bool written = false;
};

// Appends the span of `bytes` from `ptr` and counts it when written. A range that cannot be memory
// (its size unknown, or running past the end of the address space: only a bare pointer trusted with
// a shape no allocation could hold gets there) is left out, as there is nothing to compare.
void add_span(std::vector<Span>& spans, size_t* written, uint64_t ptr, int64_t bytes, int tensor, bool is_written) {
    Span sp;
    if (bytes < 0 || __builtin_add_overflow(ptr, static_cast<uint64_t>(bytes), &sp.hi)) return;
    sp.lo = ptr;
    sp.tensor = tensor;
    sp.written = is_written;
    spans.push_back(sp);
    if (is_written) ++*written;
}

bool meet(const Span& a, const Span& b) { return a.lo < b.hi && b.lo < a.hi; }

// Finds a written span meeting another span; returns false when none does. Pairs against the written
// spans for few of them, else a sort and one sweep, O(n log n): sorted by start, a span meets an
// earlier one exactly when it starts before the furthest end seen so far.
bool find_alias(Span* spans, size_t n, size_t written, Span* first, Span* second) {
    if (written == 0 || n < 2) return false;
    if (written * n <= 64) {
        for (size_t i = 0; i < n; ++i) {
            if (!spans[i].written) continue;
            for (size_t j = 0; j < n; ++j) {
                if (j != i && meet(spans[i], spans[j])) {
                    *first = spans[i];
                    *second = spans[j];
                    return true;
                }
            }
        }
        return false;
    }
    std::sort(spans, spans + n, [](const Span& a, const Span& b) { return a.lo < b.lo; });
    const Span* far_any = nullptr;      // the earlier span reaching furthest
    const Span* far_written = nullptr;  // the earlier written span reaching furthest
    for (size_t i = 0; i < n; ++i) {
        const Span& c = spans[i];
        const Span* hit = c.written ? far_any : far_written;
        if (hit && c.lo < hit->hi) {
            *first = hit->written ? *hit : c;
            *second = hit->written ? c : *hit;
            return true;
        }
        if (!far_any || c.hi > far_any->hi) far_any = &c;
        if (c.written && (!far_written || c.hi > far_written->hi)) far_written = &c;
    }
    return false;
}

std::string span_label(const PlanData& d, const Span& sp) {
    std::string who = sp.tensor < 0 ? std::string("the workspace") : d.tensors[static_cast<size_t>(sp.tensor)].label;
    char range[64];
    std::snprintf(range, sizeof range, " [0x%llx, 0x%llx)", static_cast<unsigned long long>(sp.lo),
                  static_cast<unsigned long long>(sp.hi));
    return who + range;
}

std::nullptr_t raise_alias(const PlanData& d, const Span& written, const Span& other);

// [lo, lo + bytes) when it is a range of the address space (see add_span).
inline bool span_at(uint64_t lo, int64_t bytes, int tensor, bool written, Span* out) {
    if (bytes < 0 || __builtin_add_overflow(lo, static_cast<uint64_t>(bytes), &out->hi)) return false;
    out->lo = lo;
    out->tensor = tensor;
    out->written = written;
    return true;
}

// The bound call's check for a few tensors: each written slot against every other slot, and the
// workspace against all, straight from the pointer array (no spans built, no sort). Raises and
// returns false on the first overlap.
bool check_alias_few(const PlanData& d, const hipdnnPluginDeviceBuffer_t* buffers, const int64_t* bytes,
                     const int* tensor, const uint8_t* written, const size_t* written_slots, size_t n_written, size_t n,
                     uint64_t ws, uint64_t ws_size) {
    // one written range [lo, hi) against every slot but `skip`
    auto against = [&](uint64_t lo, uint64_t hi, size_t skip, Span* other) {
        for (size_t j = 0; j < n; ++j) {
            uint64_t lo2 = reinterpret_cast<uint64_t>(buffers[j].ptr);
            if (j == skip || lo2 >= hi) continue;
            if (span_at(lo2, bytes[j], tensor[j], written[j] != 0, other) && lo < other->hi) return true;
        }
        return false;
    };
    Span a, b;
    for (size_t k = 0; k < n_written; ++k) {
        size_t w = written_slots[k];
        if (span_at(reinterpret_cast<uint64_t>(buffers[w].ptr), bytes[w], tensor[w], true, &a) &&
            against(a.lo, a.hi, w, &b))
            return raise_alias(d, a, b), false;
    }
    if (ws && ws_size && span_at(ws, static_cast<int64_t>(std::min<uint64_t>(ws_size, INT64_MAX)), -1, true, &a) &&
        against(a.lo, a.hi, n, &b))
        return raise_alias(d, a, b), false;
    return true;
}

std::nullptr_t raise_alias(const PlanData& d, const Span& written, const Span& other) {
    std::string what = written.tensor < 0 ? "the workspace is written by the engine"
                                          : "a node writes " + d.tensors[static_cast<size_t>(written.tensor)].label;
    return raise(kInvalidVariantPack, span_label(d, written) + " overlaps " + span_label(d, other) + " in memory: " +
                                          what + ", so it must not share memory with any other tensor (in-place "
                                          "execution is not supported)");
}

void run_releases(std::vector<PyObject*>& releases) {
    // Called with any pending exception saved: a release failing must not mask the call's outcome.
    for (PyObject* r : releases) {
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyObject* res = PyObject_CallNoArgs(r);
        if (!res) PyErr_WriteUnraisable(r);
        Py_XDECREF(res);
        PyErr_Restore(type, val, tb);
        Py_DECREF(r);
    }
    releases.clear();
}

// -- the guarded plugin call ------------------------------------------------------------------
bool enter(PlanData& d) {
    if (d.gate && d.gate->closed.load()) {
        raise(kInvalidValue, "the handle of graph " + quoted(d.graph_name) +
                                 " is closed: its plans were released (build the graph on an open handle)");
        return false;
    }
    d.inflight.fetch_add(1);
    if (d.released.load() || (d.gate && d.gate->closed.load())) {
        d.inflight.fetch_sub(1);
        raise(kInvalidValue, "the execution plan of graph " + quoted(d.graph_name) +
                                 " was released (its handle closed or the plan destroyed)");
        return false;
    }
    return true;
}

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

// Dispatch (spec 4.6): overrides -> the override entry, else the plain entry. Requires enter().
bool call_plugin(PlanData& d, const CallArgs& a) {
    if (a.num_overrides) {
        if (!d.override_refusal.empty()) {
            d.inflight.fetch_sub(1);
            raise(kGraphNotSupported, "executing graph " + quoted(d.graph_name) + " on engine " +
                                          std::to_string(d.engine_id) + ": NOT_SUPPORTED: " + d.override_refusal);
            return false;
        }
        if (!d.override_enabled) {
            d.inflight.fetch_sub(1);
            raise(kInvalidValue, "graph " + quoted(d.graph_name) +
                                     " was built without set_override_shape_enabled(True); overrides refused");
            return false;
        }
    }
    hipdnnPluginStatus_t status;
    std::string last;
    const PlanData* outer = tl_executing;
    tl_executing = &d;
    Py_BEGIN_ALLOW_THREADS
    if (a.num_overrides) {
        status = d.with_overrides(d.plugin_handle, d.context, a.workspace, a.buffers, a.num_buffers, a.num_overrides,
                                  a.override_uids, a.lengths, a.shapes, a.strides);
    } else {
        status = d.plain(d.plugin_handle, d.context, a.workspace, a.buffers, a.num_buffers);
    }
    if (status != HIPDNN_PLUGIN_STATUS_SUCCESS && d.last_error) {
        const char* text = nullptr;
        d.last_error(&text);  // thread-local in the plugin: read on this thread, right away
        if (text) last = printable_message(text);
    }
    Py_END_ALLOW_THREADS
    tl_executing = outer;
    d.inflight.fetch_sub(1);
    if (status != HIPDNN_PLUGIN_STATUS_SUCCESS) {
        static const char* names[] = {"HIPDNN_PLUGIN_STATUS_SUCCESS",        "HIPDNN_PLUGIN_STATUS_BAD_PARAM",
                                      "HIPDNN_PLUGIN_STATUS_INVALID_VALUE",  "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR",
                                      "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED",   "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE",
                                      "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED"};
        int s = static_cast<int>(status);
        std::string sname = (s >= 0 && s < 7) ? names[s] : "status " + std::to_string(s);
        std::string entry = a.num_overrides ? "hipdnnEnginePluginExecuteOpGraphWithOverrides"
                                            : "hipdnnEnginePluginExecuteOpGraph";
        raise(kBackendError, "executing graph " + quoted(d.graph_name) + " on engine " + std::to_string(d.engine_id) +
                                 ": plugin " + quoted(d.plugin_name) + ": " + entry + " failed with " + sname +
                                 (last.empty() ? "" : ": " + last));
        return false;
    }
    return true;
}

// ============================================================================================
// Gate
// ============================================================================================
PyObject* Gate_new(PyTypeObject* type, PyObject*, PyObject*) {
    Gate* self = reinterpret_cast<Gate*>(type->tp_alloc(type, 0));
    if (self) new (&self->closed) std::atomic<int>(0);
    return reinterpret_cast<PyObject*>(self);
}

PyObject* Gate_close(PyObject* self, PyObject*) {
    reinterpret_cast<Gate*>(self)->closed.store(1);
    Py_RETURN_NONE;
}

PyObject* Gate_get_closed(PyObject* self, void*) {
    return PyBool_FromLong(reinterpret_cast<Gate*>(self)->closed.load());
}

PyMethodDef Gate_methods[] = {
    {"close", Gate_close, METH_NOARGS, "Refuse every later call of the handle's plans."},
    {nullptr, nullptr, 0, nullptr},
};
PyGetSetDef Gate_getset[] = {
    {"closed", Gate_get_closed, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject GateType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ============================================================================================
// PlanCore
// ============================================================================================
void PlanCore_dealloc(PyObject* self) {
    PlanCore* p = reinterpret_cast<PlanCore*>(self);
    if (p->d) {
        Py_XDECREF(reinterpret_cast<PyObject*>(p->d->gate));
        delete p->d;
    }
    Py_TYPE(self)->tp_free(self);
}

// PlanCore(gate, entries=(plain, with_overrides or 0, last_error), plugin_handle, context,
//          workspace_size, location, override_enabled, override_refusal, graph_name, plugin_name,
//          engine_id, tensors=[(uid, name, data_type, dims, strides, is_virtual, is_dynamic), ...])
PyObject* PlanCore_new(PyTypeObject* type, PyObject* args, PyObject*) {
    PyObject *gate, *entries, *tensors;
    unsigned long long plugin_handle, context, workspace;
    int location, override_enabled;
    // Names are s# (pointer and length): a graph buffer may carry a NUL inside one, which "s" refuses.
    const char *refusal, *graph_name, *plugin_name;
    Py_ssize_t refusal_len, graph_name_len, plugin_name_len;
    long long engine_id;
    if (!PyArg_ParseTuple(args, "O!OKKKips#s#s#LO", &GateType, &gate, &entries, &plugin_handle, &context, &workspace,
                          &location, &override_enabled, &refusal, &refusal_len, &graph_name, &graph_name_len,
                          &plugin_name, &plugin_name_len, &engine_id, &tensors))
        return nullptr;
    unsigned long long plain = 0, with_overrides = 0, last_error = 0;
    if (!PyArg_ParseTuple(entries, "KKK", &plain, &with_overrides, &last_error)) return nullptr;
    if (!plain) {
        PyErr_SetString(PyExc_ValueError, "the plain execute entry is required");
        return nullptr;
    }
    PlanCore* self = reinterpret_cast<PlanCore*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    auto* d = new PlanData();
    self->d = d;
    Py_INCREF(gate);
    d->gate = reinterpret_cast<Gate*>(gate);
    d->plain = reinterpret_cast<ExecuteFn>(plain);
    d->with_overrides = reinterpret_cast<ExecuteOverridesFn>(with_overrides);
    d->last_error = reinterpret_cast<LastErrorFn>(last_error);
    d->plugin_handle = reinterpret_cast<hipdnnEnginePluginHandle_t>(plugin_handle);
    d->context = reinterpret_cast<hipdnnEnginePluginExecutionContext_t>(context);
    d->workspace_size = workspace;
    d->location = location;
    d->override_enabled = override_enabled != 0;
    d->override_refusal.assign(refusal, static_cast<size_t>(refusal_len));
    if (d->override_refusal.empty() && !d->with_overrides) d->override_refusal = "the plugin has no override entry";
    d->graph_name.assign(graph_name, static_cast<size_t>(graph_name_len));
    d->plugin_name.assign(plugin_name, static_cast<size_t>(plugin_name_len));
    d->engine_id = engine_id;
    PyObject* fast = PySequence_Fast(tensors, "tensors must be a sequence");
    if (!fast) {
        Py_DECREF(self);
        return nullptr;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    d->tensors.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        TensorSpec& t = d->tensors[static_cast<size_t>(i)];
        PyObject *dims, *strides;
        const char* name;
        Py_ssize_t name_len;
        long long uid;
        int dt, virt, dyn;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "Ls#iOOpp", &uid, &name, &name_len, &dt, &dims,
                              &strides, &virt, &dyn) ||
            !read_ints(dims, t.dims, "dims") || !read_ints(strides, t.strides, "strides")) {
            Py_DECREF(fast);
            Py_DECREF(self);
            return nullptr;
        }
        t.uid = uid;
        t.name.assign(name, static_cast<size_t>(name_len));
        t.label = "tensor " + quoted(t.name) + " (uid " + std::to_string(uid) + ")";
        t.data_type = dt;
        t.is_virtual = virt != 0;
        t.is_dynamic = dyn != 0;
        if (t.dims.size() != t.strides.size()) {
            Py_DECREF(fast);
            Py_DECREF(self);
            PyErr_SetString(PyExc_ValueError, "dims and strides differ in rank");
            return nullptr;
        }
        // Outermost first: larger stride (or axis-order value) first, ties by axis index.
        t.outer_first.resize(t.rank());
        for (size_t a = 0; a < t.rank(); ++a) t.outer_first[a] = static_cast<int>(a);
        std::stable_sort(t.outer_first.begin(), t.outer_first.end(),
                         [&t](int x, int y) { return t.strides[static_cast<size_t>(x)] > t.strides[static_cast<size_t>(y)]; });
        bool wildcard = std::find(t.dims.begin(), t.dims.end(), -1) != t.dims.end();
        int64_t elems = -1;
        if (!t.is_dynamic && !wildcard && !addressed_elements(t.dims.data(), t.strides.data(), t.rank(), &elems))
            elems = -1;
        t.max_elements = (t.is_dynamic || wildcard) ? -1 : elems;
        if (t.is_dynamic && !t.is_virtual) d->has_dynamic = true;
        d->by_uid[t.uid] = static_cast<int>(i);
    }
    Py_DECREF(fast);
    return reinterpret_cast<PyObject*>(self);
}

// release(): refuse new calls, wait for the calls in flight, then return (the caller destroys the
// context). Waiting from inside one of this plan's own calls would never end: refused.
PyObject* PlanCore_release(PyObject* self, PyObject*) {
    PlanData& d = *reinterpret_cast<PlanCore*>(self)->d;
    if (tl_executing == &d) {
        return raise(kInvalidValue, "the execution plan of graph " + quoted(d.graph_name) +
                                        " cannot be released from inside one of its own calls");
    }
    d.released.store(true);
    if (d.inflight.load() > 0) {
        Py_BEGIN_ALLOW_THREADS
        while (d.inflight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

PyObject* PlanCore_get_inflight(PyObject* self, void*) {
    return PyLong_FromLongLong(reinterpret_cast<PlanCore*>(self)->d->inflight.load());
}
PyObject* PlanCore_get_released(PyObject* self, void*) {
    return PyBool_FromLong(reinterpret_cast<PlanCore*>(self)->d->released.load());
}

// Override rules 2-8 of an already lowered set, against the plan's tensors (rule 3: unknown or
// virtual uids). `bound` adds the memory bound of the bound path; `is_output` (by tensor index, or
// null when unknown) marks the tensors nodes write, whose override layouts must not overlap.
bool check_overrides(const PlanData& d, OverrideSet& o, bool bound, const uint8_t* is_output) {
    for (size_t i = 0; i < o.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (o.uids[j] == o.uids[i]) {
                raise(kInvalidValue, "rule 2 (duplicate uids): uid " + std::to_string(o.uids[i]) +
                                         " is overridden more than once");
                return false;
            }
        }
    }
    for (size_t i = 0; i < o.size(); ++i) {
        int64_t uid = o.uids[i];
        int idx = o.index[i];
        if (idx < 0) {
            if (o.keys[i]) {
                PyObject* nm = PyObject_CallMethodNoArgs(o.keys[i], g.str_name);
                std::string name = nm ? py_repr(nm) : "?";
                Py_XDECREF(nm);
                PyErr_Clear();
                raise(kInvalidValue, "rule 3 (unknown uid): tensor " + name + " (uid " + std::to_string(uid) +
                                         ") belongs to another graph");
            } else {
                raise(kInvalidValue, "rule 3 (unknown uid): uid " + std::to_string(uid) + " is not a tensor of this graph");
            }
            return false;
        }
        const TensorSpec& t = d.tensors[static_cast<size_t>(idx)];
        if (t.is_virtual) {
            raise(kInvalidValue, "rule 3 (unknown uid): uid " + std::to_string(uid) + " (" + quoted(t.name) +
                                     ") is virtual; its shape follows from its inputs and cannot be overridden");
            return false;
        }
        if (!check_entry(t, uid, o.shapes[i].data(), o.shapes[i].size(), o.strides[i].data(),
                         o.strides[i].size(), bound, is_output && is_output[idx]))
            return false;
    }
    return true;
}

// The backend's descriptor execute: payload already flat (spec 4.3), pointers trusted as bare ints.
// execute_payload(uids, ptrs, workspace, override_uids, override_lengths, override_shapes, override_strides)
PyObject* PlanCore_execute_payload(PyObject* self, PyObject* args) {
    PlanData& d = *reinterpret_cast<PlanCore*>(self)->d;
    PyObject *uids, *ptrs, *o_uids, *o_lengths, *o_shapes, *o_strides;
    unsigned long long workspace;
    if (!PyArg_ParseTuple(args, "OOKOOOO", &uids, &ptrs, &workspace, &o_uids, &o_lengths, &o_shapes, &o_strides))
        return nullptr;
    std::vector<int64_t> u, p, ou, ol, os, ot;
    if (!read_ints(uids, u, "unique ids") || !read_ints(ptrs, p, "data pointers") ||
        !read_ints(o_uids, ou, "override uids") || !read_ints(o_lengths, ol, "override lengths") ||
        !read_ints(o_shapes, os, "override shapes") || !read_ints(o_strides, ot, "override strides"))
        return nullptr;
    if (u.size() != p.size()) return raise(kInvalidValue, "unique ids and data pointers differ in number");
    OverrideSet o;
    size_t offset = 0;
    for (size_t i = 0; i < ou.size(); ++i) {
        int64_t n = i < ol.size() ? ol[i] : -1;
        if (n <= 0 || offset + static_cast<size_t>(n) > os.size() || offset + static_cast<size_t>(n) > ot.size())
            return raise(kInvalidValue, "override lengths do not slice the flat shapes and strides");
        o.uids.push_back(ou[i]);
        auto it = d.by_uid.find(ou[i]);
        o.index.push_back(it == d.by_uid.end() ? -1 : it->second);
        o.shapes.emplace_back(os.begin() + static_cast<long>(offset), os.begin() + static_cast<long>(offset + n));
        o.strides.emplace_back(ot.begin() + static_cast<long>(offset), ot.begin() + static_cast<long>(offset + n));
        o.keys.push_back(nullptr);
        offset += static_cast<size_t>(n);
    }
    if (o.size() && !d.override_refusal.empty()) return raise(kGraphNotSupported, d.override_refusal);
    if (o.size() && !d.override_enabled) {
        return raise(kInvalidValue, "override attributes on a plan whose graph was built without "
                                    "IS_OVERRIDE_SHAPE_ENABLED_EXT");
    }
    if (!check_overrides(d, o, false, nullptr)) return nullptr;
    if (d.workspace_size && !workspace)
        return raise(kInvalidValue, "the plan needs " + std::to_string(d.workspace_size) +
                                        " bytes of workspace; none given");
    std::vector<hipdnnPluginDeviceBuffer_t> buffers(u.size());
    for (size_t i = 0; i < u.size(); ++i) {
        buffers[i].uid = u[i];
        buffers[i].ptr = reinterpret_cast<void*>(static_cast<uint64_t>(p[i]));
    }
    std::vector<uint32_t> lengths(o.size());
    std::vector<const int64_t*> sp(o.size()), tp(o.size());
    for (size_t i = 0; i < o.size(); ++i) {
        lengths[i] = static_cast<uint32_t>(o.shapes[i].size());
        sp[i] = o.shapes[i].data();
        tp[i] = o.strides[i].data();
    }
    CallArgs a;
    a.workspace = reinterpret_cast<void*>(workspace);
    a.buffers = buffers.data();
    a.num_buffers = static_cast<uint32_t>(buffers.size());
    a.num_overrides = static_cast<uint32_t>(o.size());
    a.override_uids = o.uids.data();
    a.lengths = lengths.data();
    a.shapes = sp.data();
    a.strides = tp.data();
    if (!enter(d) || !call_plugin(d, a)) return nullptr;
    Py_RETURN_NONE;
}

PyMethodDef PlanCore_methods[] = {
    {"release", PlanCore_release, METH_NOARGS, "Refuse new calls and wait for those in flight."},
    {"execute_payload", PlanCore_execute_payload, METH_VARARGS, "Execute a flat backend payload."},
    {nullptr, nullptr, 0, nullptr},
};
PyObject* PlanCore_get_location(PyObject* self, void*) {
    return PyLong_FromLong(reinterpret_cast<PlanCore*>(self)->d->location);
}
int PlanCore_set_location(PyObject* self, PyObject* value, void*) {
    long v = value ? PyLong_AsLong(value) : -1;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < kLocationUnknown || v > kLocationDevice) {
        PyErr_SetString(PyExc_ValueError, "location is 0 (unknown), 1 (host) or 2 (device)");
        return -1;
    }
    reinterpret_cast<PlanCore*>(self)->d->location = static_cast<int>(v);
    return 0;
}

PyGetSetDef PlanCore_getset[] = {
    {"location", PlanCore_get_location, PlanCore_set_location, nullptr, nullptr},
    {"inflight", PlanCore_get_inflight, nullptr, nullptr, nullptr},
    {"released", PlanCore_get_released, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};
PyTypeObject PlanCoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ============================================================================================
// Executor
// ============================================================================================
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

struct Scratch {
    Effective eff;
    std::vector<Span> spans;
    OverrideSet overrides;
    std::vector<hipdnnPluginDeviceBuffer_t> buffers;
    std::vector<uint8_t> seen;
    std::vector<PyObject*> releases;
    std::vector<uint32_t> lengths;
    std::vector<const int64_t*> shape_ptrs, stride_ptrs;
    Buf buf;
};
thread_local Scratch tl_scratch;
thread_local int tl_scratch_depth = 0;

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

void Executor_dealloc(PyObject* self) {
    Executor* e = reinterpret_cast<Executor*>(self);
    if (e->x) {
        Py_XDECREF(reinterpret_cast<PyObject*>(e->x->plan));
        for (PyObject* k : e->x->keys) Py_DECREF(k);
        Py_XDECREF(e->x->stream_source);
        delete e->x;
    }
    Py_TYPE(self)->tp_free(self);
}

bool parse_ref(PyObject* o, Ref& r, const PlanData& d) {
    int t, a;
    if (!PyArg_ParseTuple(o, "ii", &t, &a)) return false;
    if (t < 0 || static_cast<size_t>(t) >= d.tensors.size() || a < 0 ||
        static_cast<size_t>(a) >= d.tensors[static_cast<size_t>(t)].rank()) {
        PyErr_Format(PyExc_ValueError, "shape rule refers to tensor %d axis %d, outside the plan", t, a);
        return false;
    }
    r = Ref{t, a};
    return true;
}

bool parse_refs(PyObject* seq, std::vector<Ref>& out, const PlanData& d) {
    PyObject* fast = PySequence_Fast(seq, "refs must be a sequence");
    if (!fast) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i) {
        Ref r{0, 0};
        if (!parse_ref(PySequence_Fast_GET_ITEM(fast, i), r, d)) {
            Py_DECREF(fast);
            return false;
        }
        out.push_back(r);
    }
    Py_DECREF(fast);
    return true;
}

bool parse_tensor_list(PyObject* seq, std::vector<int>& out, const PlanData& d) {
    std::vector<int64_t> v;
    if (!read_ints(seq, v, "shape rule tensors")) return false;
    for (int64_t t : v) {
        if (t < 0 || static_cast<size_t>(t) >= d.tensors.size()) {
            PyErr_SetString(PyExc_ValueError, "shape rule names a tensor outside the plan");
            return false;
        }
        out.push_back(static_cast<int>(t));
    }
    return true;
}

// rules: [(prefix, node_name, [rule, ...]), ...] with rule one of
//   ("eq" | "multiple" | "one_or_eq", refs, shape_tensors, message)
//   ("produce", tensor, exprs, shape_tensors, message)  with expr ("ref", (t, a)) | ("const", c) |
//   ("bcast", refs, shape_tensors, message)
bool parse_rules(PyObject* spec, std::vector<NodeRules>& nodes, const PlanData& d) {
    PyObject* fast = PySequence_Fast(spec, "rules must be a sequence");
    if (!fast) return false;
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); ++i) {
        const char *prefix, *name;
        Py_ssize_t prefix_len, name_len;
        PyObject* rules;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "s#s#O", &prefix, &prefix_len, &name, &name_len,
                              &rules)) {
            ok = false;
            break;
        }
        NodeRules node;
        node.prefix.assign(prefix, static_cast<size_t>(prefix_len));
        node.name.assign(name, static_cast<size_t>(name_len));
        PyObject* rf = PySequence_Fast(rules, "node rules must be a sequence");
        if (!rf) {
            ok = false;
            break;
        }
        for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(rf); ++k) {
            PyObject* item = PySequence_Fast_GET_ITEM(rf, k);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) {
                PyErr_SetString(PyExc_ValueError, "a shape rule must be a tuple");
                ok = false;
                break;
            }
            const char* kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0));
            if (!kind) {
                ok = false;
                break;
            }
            Rule rule;
            std::string k2 = kind;
            if (k2 == "eq" || k2 == "multiple" || k2 == "one_or_eq") {
                const char* msg;
                PyObject *refs, *shapes, *kindobj;
                ok = PyArg_ParseTuple(item, "OOOs", &kindobj, &refs, &shapes, &msg) && parse_refs(refs, rule.refs, d) &&
                     parse_tensor_list(shapes, rule.shapes, d);
                rule.kind = k2 == "eq" ? Rule::kEqual : (k2 == "multiple" ? Rule::kMultiple : Rule::kOneOrEqual);
                rule.message = ok ? msg : "";
                if (ok && rule.refs.size() < (rule.kind == Rule::kEqual ? 1u : 2u)) {
                    PyErr_SetString(PyExc_ValueError, "a shape rule lacks operands");
                    ok = false;
                }
            } else if (k2 == "produce") {
                const char* msg;
                PyObject *exprs, *shapes, *kindobj;
                int tensor;
                ok = PyArg_ParseTuple(item, "OiOOs", &kindobj, &tensor, &exprs, &shapes, &msg) &&
                     parse_tensor_list(shapes, rule.shapes, d);
                if (ok && (tensor < 0 || static_cast<size_t>(tensor) >= d.tensors.size())) {
                    PyErr_SetString(PyExc_ValueError, "produce names a tensor outside the plan");
                    ok = false;
                }
                if (!ok) break;
                rule.kind = Rule::kProduce;
                rule.tensor = tensor;
                rule.message = msg;
                PyObject* ef = PySequence_Fast(exprs, "exprs must be a sequence");
                if (!ef) {
                    ok = false;
                    break;
                }
                for (Py_ssize_t a = 0; ok && a < PySequence_Fast_GET_SIZE(ef); ++a) {
                    PyObject* ex = PySequence_Fast_GET_ITEM(ef, a);
                    DimExpr x;
                    const char* ek = PyTuple_Check(ex) && PyTuple_GET_SIZE(ex) >= 2
                                         ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(ex, 0))
                                         : nullptr;
                    std::string ek2 = ek ? ek : "";
                    if (ek2 == "ref") {
                        x.kind = DimExpr::kRef;
                        ok = parse_ref(PyTuple_GET_ITEM(ex, 1), x.ref, d);
                    } else if (ek2 == "const") {
                        x.kind = DimExpr::kConst;
                        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(ex, 1));
                        ok = !(v == -1 && PyErr_Occurred());
                        x.value = v;
                    } else if (ek2 == "bcast" && PyTuple_GET_SIZE(ex) == 4) {
                        x.kind = DimExpr::kBroadcast;
                        const char* m = PyUnicode_AsUTF8(PyTuple_GET_ITEM(ex, 3));
                        ok = m && parse_refs(PyTuple_GET_ITEM(ex, 1), x.refs, d) &&
                             parse_tensor_list(PyTuple_GET_ITEM(ex, 2), x.shapes, d);
                        if (m) x.message = m;
                    } else {
                        PyErr_SetString(PyExc_ValueError, "unknown dim expression");
                        ok = false;
                    }
                    rule.exprs.push_back(x);
                }
                Py_DECREF(ef);
                if (ok && rule.exprs.size() != d.tensors[static_cast<size_t>(tensor)].rank()) {
                    PyErr_SetString(PyExc_ValueError, "produce gives a number of dims other than the tensor's rank");
                    ok = false;
                }
            } else {
                PyErr_Format(PyExc_ValueError, "unknown shape rule kind %s", kind);
                ok = false;
            }
            if (ok) node.rules.push_back(std::move(rule));
        }
        Py_DECREF(rf);
        if (ok) nodes.push_back(std::move(node));
    }
    Py_DECREF(fast);
    return ok;
}

// Executor(plan_core, keys={tensor object: uid}, rules, stream_source, outputs=())
// `outputs`: the uids of the tensors nodes write; their memory may not alias any other tensor's.
PyObject* Executor_new(PyTypeObject* type, PyObject* args, PyObject*) {
    PyObject *plan, *keys, *rules, *stream_source, *outputs = nullptr;
    if (!PyArg_ParseTuple(args, "O!O!OO|O", &PlanCoreType, &plan, &PyDict_Type, &keys, &rules, &stream_source,
                          &outputs))
        return nullptr;
    Executor* self = reinterpret_cast<Executor*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    auto* x = new ExecutorData();
    self->x = x;
    Py_INCREF(plan);
    x->plan = reinterpret_cast<PlanCore*>(plan);
    Py_INCREF(stream_source);
    x->stream_source = stream_source;
    const PlanData& d = *x->plan->d;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(keys, &pos, &k, &v)) {
        long long uid = PyLong_AsLongLong(v);
        if (uid == -1 && PyErr_Occurred()) {
            Py_DECREF(self);
            return nullptr;
        }
        auto it = d.by_uid.find(uid);
        if (it == d.by_uid.end()) {
            Py_DECREF(self);
            PyErr_Format(PyExc_ValueError, "key uid %lld is not a tensor of the plan", uid);
            return nullptr;
        }
        Py_INCREF(k);
        x->keys.push_back(k);
        x->by_key[k] = it->second;
    }
    if (!parse_rules(rules, x->nodes, d)) {
        Py_DECREF(self);
        return nullptr;
    }
    x->computed_offset.resize(d.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
        x->computed_offset[i] = x->computed_size;
        if (d.tensors[i].is_virtual) x->computed_size += d.tensors[i].rank();
    }
    x->is_output.assign(d.tensors.size(), 0);
    if (outputs && outputs != Py_None) {
        std::vector<int64_t> uids;
        if (!read_ints(outputs, uids, "outputs")) {
            Py_DECREF(self);
            return nullptr;
        }
        for (int64_t uid : uids) {
            auto it = d.by_uid.find(uid);
            if (it == d.by_uid.end()) {
                Py_DECREF(self);
                PyErr_Format(PyExc_ValueError, "output uid %lld is not a tensor of the plan", static_cast<long long>(uid));
                return nullptr;
            }
            size_t i = static_cast<size_t>(it->second);
            if (!d.tensors[i].is_virtual) x->is_output[i] = 1;
        }
    }
    return reinterpret_cast<PyObject*>(self);
}

uint64_t read_stream(const ExecutorData& x) {
    PyObject* s = PyObject_GetAttrString(x.stream_source, "stream");
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    uint64_t v = PyLong_AsUnsignedLongLong(s);
    Py_DECREF(s);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return v;
}

// Key of an override or variant-pack entry -> (uid, tensor index or -1). Returns false with error.
enum class KeyUse { kOverride, kVariantPack, kBind };

bool resolve_key(const ExecutorData& x, PyObject* key, KeyUse use, int64_t* uid, int* index, PyObject** tensor_key) {
    const PlanData& d = *x.plan->d;
    *tensor_key = nullptr;
    auto it = x.by_key.find(key);
    if (it != x.by_key.end()) {
        *index = it->second;
        *uid = d.tensors[static_cast<size_t>(it->second)].uid;
        *tensor_key = key;
        return true;
    }
    if (g.tensor_type && PyObject_TypeCheck(key, reinterpret_cast<PyTypeObject*>(g.tensor_type))) {
        PyObject* nm = PyObject_CallMethodNoArgs(key, g.str_name);
        std::string name = nm ? py_repr(nm) : "?";
        Py_XDECREF(nm);
        PyErr_Clear();
        if (use == KeyUse::kVariantPack) {
            raise(kInvalidVariantPack, "variant pack key " + name + " is not a tensor of this graph");
            return false;
        }
        if (use == KeyUse::kBind) {
            raise(kInvalidValue, "bind: tensor " + name + " is not a tensor of this graph");
            return false;
        }
        PyObject* u = PyObject_CallMethodNoArgs(key, g.str_uid);
        if (!u || u == Py_None) {
            Py_XDECREF(u);
            PyErr_Clear();
            raise(kInvalidValue, "override key tensor " + name + " has no uid (validate the graph first)");
            return false;
        }
        long long v = PyLong_AsLongLong(u);
        Py_DECREF(u);
        if (PyErr_Occurred()) return false;
        *uid = v;
        *index = -1;
        *tensor_key = key;  // rule 3 names it as another graph's tensor
        return true;
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow) {
            raise(use == KeyUse::kVariantPack ? kInvalidVariantPack : kInvalidValue,
                  (use == KeyUse::kVariantPack ? "variant pack uid " : "rule 3 (unknown uid): uid ") + py_repr(key) +
                      " is not a tensor of this graph");
            return false;
        }
        *uid = v;
        auto u = d.by_uid.find(v);
        *index = u == d.by_uid.end() ? -1 : u->second;
        return true;
    }
    if (use == KeyUse::kOverride && !PyBool_Check(key) && PyIndex_Check(key)) {
        PyObject* idx = PyNumber_Index(key);
        if (idx) {
            bool ok = resolve_key(x, idx, use, uid, index, tensor_key);
            Py_DECREF(idx);
            return ok;
        }
        PyErr_Clear();
    }
    if (use == KeyUse::kVariantPack) {
        raise(kInvalidVariantPack, "variant pack key " + py_repr(key) + " is neither a tensor nor a uid");
    } else if (use == KeyUse::kBind) {
        raise(kInvalidValue, "bind: " + py_repr(key) + " is neither a tensor nor a uid");
    } else {
        raise(kInvalidValue, "override key " + py_repr(key) + " is neither a tensor nor a uid");
    }
    return false;
}

bool is_mapping(PyObject* o) {
    if (PyDict_Check(o)) return true;
    if (PyList_Check(o) || PyTuple_Check(o) || !g.mapping_abc) return false;
    int r = PyObject_IsInstance(o, g.mapping_abc);
    if (r < 0) PyErr_Clear();
    return r == 1;
}

// Lower either call form (spec 4.2) into `o`. Rule 1 is checked here: only the parallel form can break it.
bool lower_overrides(const ExecutorData& x, PyObject* o_uids, PyObject* o_shapes, PyObject* o_strides, PyObject* map,
                     OverrideSet& o) {
    o.clear();
    bool parallel = o_uids != Py_None || o_shapes != Py_None || o_strides != Py_None;
    if (map != Py_None && parallel) {
        raise(kInvalidValue, "pass overrides either as override_uids/shapes/strides or as overrides={...}, not both");
        return false;
    }
    if (map != Py_None) {
        if (!is_mapping(map)) {
            raise(kInvalidValue, "overrides must be a mapping {tensor or uid: OverrideEntry}");
            return false;
        }
        PyObject* items = PyDict_Check(map) ? PyDict_Items(map) : PyMapping_Items(map);
        if (!items) return raise_chained(kInvalidValue, "cannot read the overrides mapping's items"), false;
        bool ok = true;
        Py_ssize_t n = PyList_GET_SIZE(items);
        for (Py_ssize_t i = 0; ok && i < n; ++i) {
            PyObject* kv = PyList_GET_ITEM(items, i);
            PyObject* key = PyTuple_GET_ITEM(kv, 0);
            PyObject* entry = PyTuple_GET_ITEM(kv, 1);
            if (g.entry_type && !PyObject_TypeCheck(entry, reinterpret_cast<PyTypeObject*>(g.entry_type))) {
                raise(kInvalidValue, "override for " + py_repr(key) + " must be an OverrideEntry, got " +
                                         Py_TYPE(entry)->tp_name);
                ok = false;
                break;
            }
            int64_t uid;
            int index;
            PyObject* tkey;
            if (!resolve_key(x, key, KeyUse::kOverride, &uid, &index, &tkey)) {
                ok = false;
                break;
            }
            o.uids.push_back(uid);
            o.index.push_back(index);
            o.keys.push_back(tkey);
            o.shapes.emplace_back();
            o.strides.emplace_back();
            PyObject* shape = PyObject_GetAttr(entry, g.str_shape);
            PyObject* stride = shape ? PyObject_GetAttr(entry, g.str_stride) : nullptr;
            if (!shape || !stride) {
                raise_chained(kInvalidValue, "override for uid " + std::to_string(uid) + ": cannot read its " +
                                                 (shape ? "stride" : "shape"));
                ok = false;
            }
            ok = ok && read_ints(shape, o.shapes.back(), "override shape of uid " + std::to_string(uid)) &&
                 read_ints(stride, o.strides.back(), "override stride of uid " + std::to_string(uid));
            Py_XDECREF(shape);
            Py_XDECREF(stride);
        }
        Py_DECREF(items);
        if (!ok) return false;
        for (size_t i = 0; i < o.size(); ++i) {
            for (size_t j = 0; j < i; ++j) {
                if (o.uids[i] == o.uids[j]) {
                    raise(kInvalidValue, "rule 2 (duplicate uids): uid " + std::to_string(o.uids[i]) +
                                             " is overridden more than once (a tensor and its uid both appear as "
                                             "override keys)");
                    return false;
                }
            }
        }
        return true;
    }
    if (!parallel) return true;
    PyObject* seqs[3] = {o_uids, o_shapes, o_strides};
    PyObject* fast[3] = {nullptr, nullptr, nullptr};
    const char* what[3] = {"override_uids", "override_shapes", "override_strides"};
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
        if (seqs[i] == Py_None) continue;
        if (PyUnicode_Check(seqs[i]) || PyBytes_Check(seqs[i])) {
            raise(kInvalidValue, std::string(what[i]) + " must be a sequence");
            ok = false;
            break;
        }
        fast[i] = PySequence_Fast(seqs[i], "");
        if (!fast[i]) {
            PyErr_Clear();
            raise(kInvalidValue, std::string(what[i]) + " must be a sequence, got " + py_repr(seqs[i]));
            ok = false;
        }
    }
    Py_ssize_t n[3];
    for (int i = 0; i < 3; ++i) n[i] = fast[i] ? PySequence_Fast_GET_SIZE(fast[i]) : 0;
    if (ok && !(n[0] == n[1] && n[1] == n[2])) {
        raise(kInvalidValue, "rule 1 (length consistency): " + std::to_string(n[0]) + " override_uids, " +
                                 std::to_string(n[1]) + " override_shapes, " + std::to_string(n[2]) +
                                 " override_strides");
        ok = false;
    }
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i) {
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, PySequence_Fast_GET_ITEM(fast[0], i), KeyUse::kOverride, &uid, &index, &tkey)) {
            ok = false;
            break;
        }
        o.uids.push_back(uid);
        o.index.push_back(index);
        o.keys.push_back(tkey);
    }
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i) {
        o.shapes.emplace_back();
        ok = read_ints(PySequence_Fast_GET_ITEM(fast[1], i), o.shapes.back(),
                       "override_shapes[" + std::to_string(i) + "]");
    }
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i) {
        o.strides.emplace_back();
        ok = read_ints(PySequence_Fast_GET_ITEM(fast[2], i), o.strides.back(),
                       "override_strides[" + std::to_string(i) + "]");
    }
    for (int i = 0; i < 3; ++i) Py_XDECREF(fast[i]);
    return ok;
}

bool refuse_flagless(const PlanData& d) {
    std::string msg =
        "graph " + quoted(d.graph_name) + " was built without set_override_shape_enabled(True); overrides refused";
    if (g.refusal_logger) {
        PyObject* m = PyUnicode_FromString(msg.c_str());
        PyObject* r = m ? PyObject_CallOneArg(g.refusal_logger, m) : nullptr;
        Py_XDECREF(m);
        if (!r) PyErr_Clear();
        Py_XDECREF(r);
    }
    raise(kInvalidValue, msg);
    return false;
}

// Effective dims of every tensor for this call, then the nodes' shape rules.
bool check_effective(const ExecutorData& x, const OverrideSet& o, Effective& e) {
    const PlanData& d = *x.plan->d;
    size_t n = d.tensors.size();
    e.dims.resize(n);
    for (size_t i = 0; i < n; ++i) e.dims[i] = d.tensors[i].dims.data();
    for (size_t i = 0; i < o.size(); ++i) e.dims[static_cast<size_t>(o.index[i])] = o.shapes[i].data();
    if (d.has_dynamic) {
        for (size_t i = 0; i < n; ++i) {
            const TensorSpec& t = d.tensors[i];
            if (t.is_dynamic && !t.is_virtual && e.dims[i] == t.dims.data()) {
                raise(kInvalidValue, "dynamic " + t.label + " needs an override (shape and strides) at every execute");
                return false;
            }
        }
    }
    e.computed.resize(x.computed_size);
    return run_rules(d, x.nodes, x.computed_offset, e);
}

// execute(variant_pack, workspace, override_uids, override_shapes, override_strides, overrides)
PyObject* Executor_execute(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "execute takes 6 arguments");
        return nullptr;
    }
    ExecutorData& x = *reinterpret_cast<Executor*>(self)->x;
    PlanData& d = *x.plan->d;
    PyObject* pack = args[0];
    PyObject* workspace = args[1];
    PyObject* o_uids = args[2];
    PyObject* map = args[5];
    // The design card's positional form: a mapping in override_uids' place is the map form.
    if (map == Py_None && o_uids != Py_None && args[3] == Py_None && args[4] == Py_None && is_mapping(o_uids)) {
        map = o_uids;
        o_uids = Py_None;
    }
    ScratchLease<Scratch> lease(tl_scratch, tl_scratch_depth);
    Scratch& s = lease.get();
    OverrideSet& o = s.overrides;
    if (!lower_overrides(x, o_uids, args[3], args[4], map, o)) return nullptr;
    if (o.size() && !d.override_enabled) return refuse_flagless(d), nullptr;
    if (o.size() && !check_overrides(d, o, false, x.is_output.data())) return nullptr;
    if ((o.size() || d.has_dynamic) && !check_effective(x, o, s.eff)) return nullptr;

    // Variant pack.
    if (!is_mapping(pack)) return raise(kInvalidVariantPack, "the variant pack must be a mapping {tensor or uid: buffer}");
    PyObject* items = PyDict_Check(pack) ? nullptr : PyMapping_Items(pack);
    if (!PyDict_Check(pack) && !items) return raise_chained(kInvalidVariantPack, "cannot read the variant pack's items");
    s.spans.clear();
    size_t written = 0;
    size_t nt = d.tensors.size();
    s.seen.assign(nt, 0);
    s.buffers.clear();
    std::vector<PyObject*>& releases = s.releases;
    uint64_t stream = d.location == kLocationHost ? 0 : read_stream(x);
    bool ok = true;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    // override index by tensor, to find a tensor's effective dims and strides
    SmallVec<int, 64> override_of(nt);
    for (size_t t = 0; t < nt; ++t) override_of[t] = -1;
    for (size_t k = 0; k < o.size(); ++k) override_of[static_cast<size_t>(o.index[k])] = static_cast<int>(k);
    while (ok) {
        if (items) {
            if (i >= PyList_GET_SIZE(items)) break;
            PyObject* kv = PyList_GET_ITEM(items, i++);
            key = PyTuple_GET_ITEM(kv, 0);
            value = PyTuple_GET_ITEM(kv, 1);
        } else if (!PyDict_Next(pack, &pos, &key, &value)) {
            break;
        }
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, key, KeyUse::kVariantPack, &uid, &index, &tkey)) {
            ok = false;
            break;
        }
        if (index < 0) {
            raise(kInvalidVariantPack, "variant pack uid " + std::to_string(uid) + " is not a tensor of this graph");
            ok = false;
            break;
        }
        const TensorSpec& t = d.tensors[static_cast<size_t>(index)];
        if (s.seen[static_cast<size_t>(index)]) {
            raise(kInvalidVariantPack, "uid " + std::to_string(uid) + " appears twice in the variant pack");
            ok = false;
            break;
        }
        s.seen[static_cast<size_t>(index)] = 1;
        if (t.is_virtual) {
            raise(kInvalidVariantPack, "tensor " + quoted(t.name) + " (uid " + std::to_string(uid) +
                                           ") is virtual and takes no buffer; set_output(True) to read it");
            ok = false;
            break;
        }
        Buf& b = s.buf;
        b = Buf();
        if (!read_value(value, t.label, stream, b, releases)) {
            ok = false;
            break;
        }
        int ov = override_of[static_cast<size_t>(index)];
        const int64_t* dims = ov >= 0 ? o.shapes[static_cast<size_t>(ov)].data() : t.dims.data();
        const int64_t* strides = ov >= 0 ? o.strides[static_cast<size_t>(ov)].data() : t.strides.data();
        int64_t extent = -1;
        if (!check_buffer(b, t.label, t.data_type, dims, strides, t.rank(), ov >= 0, &extent)) {
            ok = false;
            break;
        }
        // A bare pointer is trusted to hold the tensor: it spans what the tensor addresses.
        if (!b.sized && !addressed_bytes(t.data_type, dims, strides, t.rank(), 1, &extent)) extent = -1;
        add_span(s.spans, &written, b.ptr, extent, index, x.is_output[static_cast<size_t>(index)] != 0);
        if (b.sized) {
            if (d.location == kLocationHost && b.on_device) {
                raise(kInvalidValue, t.label + ": device memory handed to engine " + std::to_string(d.engine_id) +
                                         ", which runs on the host; to run on a GPU, build the graph on "
                                         "hipdnn.Handle(device=\"cuda\") (or \"hip\")");
                ok = false;
                break;
            }
            if (d.location == kLocationDevice && !b.on_device) {
                raise(kInvalidValue, t.label + ": host memory handed to engine " + std::to_string(d.engine_id) +
                                         ", which runs on a GPU; copy it to the device first, or build the graph "
                                         "on hipdnn.Handle(device=\"cpu\") to run on the host");
                ok = false;
                break;
            }
        }
        hipdnnPluginDeviceBuffer_t pb;
        pb.uid = uid;
        pb.ptr = reinterpret_cast<void*>(b.ptr);
        s.buffers.push_back(pb);
    }
    Py_XDECREF(items);
    if (ok) {
        std::string missing;
        for (size_t t = 0; t < nt; ++t) {
            const TensorSpec& ts = d.tensors[t];
            if (!ts.is_virtual && !s.seen[t]) {
                if (!missing.empty()) missing += ", ";
                missing += quoted(ts.name) + " (uid " + std::to_string(ts.uid) + ")";
            }
        }
        if (!missing.empty()) {
            raise(kInvalidVariantPack, "no buffer for tensor(s) " + missing);
            ok = false;
        }
    }
    // Workspace.
    uint64_t ws = 0;
    if (ok) {
        bool none = workspace == Py_None;
        if (!none && PyLong_Check(workspace) && !PyBool_Check(workspace)) {
            int overflow = 0;
            none = PyLong_AsLongLongAndOverflow(workspace, &overflow) == 0 && !overflow;
        }
        if (none) {
            if (d.workspace_size) {
                raise(kInvalidValue, "the plan needs a workspace of " + std::to_string(d.workspace_size) + " bytes");
                ok = false;
            }
        } else {
            Buf wb;
            if (!read_value(workspace, "workspace", stream, wb, releases)) {
                ok = false;
            } else if (wb.sized && (wb.ptr < wb.low || wb.high < wb.ptr || wb.high - wb.ptr < d.workspace_size)) {
                raise(kInvalidValue, "workspace holds " + std::to_string(wb.high > wb.ptr ? wb.high - wb.ptr : 0) +
                                         " bytes, the plan needs " + std::to_string(d.workspace_size));
                ok = false;
            }
            ws = wb.ptr;
        }
    }
    if (ok) {
        if (ws && d.workspace_size)
            add_span(s.spans, &written, ws, static_cast<int64_t>(std::min<uint64_t>(d.workspace_size, INT64_MAX)), -1,
                     true);
        Span a, b;
        if (find_alias(s.spans.data(), s.spans.size(), written, &a, &b)) {
            raise_alias(d, a, b);
            ok = false;
        }
    }
    if (ok) {
        s.lengths.resize(o.size());
        s.shape_ptrs.resize(o.size());
        s.stride_ptrs.resize(o.size());
        for (size_t k = 0; k < o.size(); ++k) {
            s.lengths[k] = static_cast<uint32_t>(o.shapes[k].size());
            s.shape_ptrs[k] = o.shapes[k].data();
            s.stride_ptrs[k] = o.strides[k].data();
        }
        CallArgs a;
        a.workspace = reinterpret_cast<void*>(ws);
        a.buffers = s.buffers.data();
        a.num_buffers = static_cast<uint32_t>(s.buffers.size());
        a.num_overrides = static_cast<uint32_t>(o.size());
        a.override_uids = o.uids.data();
        a.lengths = s.lengths.data();
        a.shapes = s.shape_ptrs.data();
        a.strides = s.stride_ptrs.data();
        ok = enter(d) && call_plugin(d, a);
    }
    if (!releases.empty()) run_releases(releases);
    if (!ok) return nullptr;
    Py_RETURN_NONE;
}

// ============================================================================================
// Binding: the bound call
// ============================================================================================
struct BindingData {
    Executor* executor = nullptr;
    std::vector<int64_t> uids;
    std::vector<int> override_index;  // tensor index of each bound override
    std::vector<int64_t> override_uids;
    std::vector<uint32_t> lengths;
    size_t total_rank = 0;
    // Aliasing, per pointer slot: its tensor, whether a node writes it, and the bytes it spans at the
    // declared maximum (-1: unbounded, a dynamic tensor, which every call overrides).
    std::vector<int> slot_tensor;
    std::vector<uint8_t> slot_written;
    std::vector<int64_t> slot_bytes;
    std::vector<size_t> override_slot;  // pointer slot of each bound override
    std::vector<size_t> written_slots;  // the slots nodes write
};

struct Binding {
    PyObject_HEAD
    BindingData* b;
    vectorcallfunc vectorcall;
};

void Binding_dealloc(PyObject* self) {
    Binding* b = reinterpret_cast<Binding*>(self);
    if (b->b) {
        Py_XDECREF(reinterpret_cast<PyObject*>(b->b->executor));
        delete b->b;
    }
    Py_TYPE(self)->tp_free(self);
}

struct BoundScratch {
    std::vector<hipdnnPluginDeviceBuffer_t> buffers;
    std::vector<Span> spans;
    std::vector<int64_t> bytes;
    OverrideSet overrides;
    std::vector<const int64_t*> shape_ptrs, stride_ptrs;
    Effective eff;
};
thread_local BoundScratch tl_bound;
thread_local int tl_bound_depth = 0;

bool read_ints_into(PyObject* seq, std::vector<int64_t>& out, const char* what, size_t i) {
    if (PyList_CheckExact(seq) || PyTuple_CheckExact(seq)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject** items = PySequence_Fast_ITEMS(seq);
        out.resize(static_cast<size_t>(n));
        for (Py_ssize_t k = 0; k < n; ++k) {
            PyObject* it = items[k];
            if (PyLong_CheckExact(it)) {
                int overflow = 0;
                long long v = PyLong_AsLongLongAndOverflow(it, &overflow);
                if (!overflow) {
                    out[static_cast<size_t>(k)] = v;
                    continue;
                }
            }
            if (!to_int64(it, &out[static_cast<size_t>(k)], "", std::string(what) + "[" + std::to_string(i) + "]"))
                return false;
        }
        return true;
    }
    return read_ints(seq, out, std::string(what) + "[" + std::to_string(i) + "]");
}

PyObject* Binding_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    ExecutorData& x = *bd.executor->x;
    PlanData& d = *x.plan->d;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject* params[4] = {nullptr, nullptr, Py_None, Py_None};
    static const char* names[4] = {"ptrs", "workspace", "override_shapes", "override_strides"};
    if (nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "bound call takes at most 4 arguments");
        return nullptr;
    }
    for (Py_ssize_t i = 0; i < nargs; ++i) params[i] = args[i];
    if (kwnames) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
            const char* kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
            int slot = -1;
            for (int j = 0; j < 4 && kw; ++j)
                if (std::strcmp(kw, names[j]) == 0) slot = j;
            if (slot < 0 || slot < nargs) {
                PyErr_Format(PyExc_TypeError, "bound call got an unexpected or repeated keyword %s", kw ? kw : "?");
                return nullptr;
            }
            params[slot] = args[nargs + k];
        }
    }
    if (!params[0]) {
        PyErr_SetString(PyExc_TypeError, "bound call needs ptrs");
        return nullptr;
    }
    ScratchLease<BoundScratch> lease(tl_bound, tl_bound_depth);
    BoundScratch& s = lease.get();
    size_t n = bd.uids.size();
    PyObject* ptrs = PySequence_Fast(params[0], "");
    if (!ptrs) {
        PyErr_Clear();
        return raise(kInvalidVariantPack, "pointers must be a sequence of ints");
    }
    if (static_cast<size_t>(PySequence_Fast_GET_SIZE(ptrs)) != n) {
        std::string m = "expected " + std::to_string(n) + " pointers, got " +
                        std::to_string(PySequence_Fast_GET_SIZE(ptrs));
        Py_DECREF(ptrs);
        return raise(kInvalidVariantPack, m);
    }
    s.buffers.resize(n);
    PyObject** items = PySequence_Fast_ITEMS(ptrs);
    for (size_t i = 0; i < n; ++i) {
        PyObject* p = items[i];
        unsigned long long v = 0;
        if (PyLong_Check(p) && !PyBool_Check(p)) {
            v = PyLong_AsUnsignedLongLong(p);
            if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
                PyErr_Clear();
                v = 0;
            }
        }
        if (!v) {
            std::string what = PyLong_Check(p) ? "null pointer " + py_repr(p) : "pointer " + py_repr(p) + " (not an int)";
            Py_DECREF(ptrs);
            return raise(kInvalidVariantPack, what + " for " + d.tensors[static_cast<size_t>(bd.slot_tensor[i])].label);
        }
        s.buffers[i].uid = bd.uids[i];
        s.buffers[i].ptr = reinterpret_cast<void*>(v);
    }
    Py_DECREF(ptrs);
    uint64_t ws = 0;
    if (params[1] && params[1] != Py_None) {
        if (!PyLong_Check(params[1]) || PyBool_Check(params[1]))
            return raise(kInvalidValue, "the bound call's workspace is an int pointer");
        ws = PyLong_AsUnsignedLongLong(params[1]);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return raise(kInvalidValue, "workspace pointer " + py_repr(params[1]) + " is not a valid address");
        }
    }
    if (d.workspace_size && !ws)
        return raise(kInvalidValue, "the plan needs a workspace of " + std::to_string(d.workspace_size) + " bytes");
    PyObject* shapes = params[2];
    PyObject* strides = params[3];
    OverrideSet& o = s.overrides;
    o.clear();
    size_t m = bd.override_uids.size();
    if (m && shapes != Py_None) {
        PyObject* fs = PySequence_Fast(shapes, "");
        PyObject* ft = fs && strides != Py_None ? PySequence_Fast(strides, "") : nullptr;
        if (!fs || (strides != Py_None && !ft)) {
            PyErr_Clear();
            Py_XDECREF(fs);
            return raise(kInvalidValue, "override shapes and strides must be sequences of int sequences");
        }
        size_t ns = static_cast<size_t>(PySequence_Fast_GET_SIZE(fs));
        size_t nst = ft ? static_cast<size_t>(PySequence_Fast_GET_SIZE(ft)) : 0;
        if (ns != m || nst != m) {
            Py_DECREF(fs);
            Py_XDECREF(ft);
            return raise(kInvalidValue, "rule 1 (length consistency): bound for " + std::to_string(m) +
                                            " overrides, got " + std::to_string(ns) + " shapes and " +
                                            std::to_string(nst) + " strides");
        }
        o.uids = bd.override_uids;
        o.index = bd.override_index;
        o.keys.assign(m, nullptr);
        o.shapes.resize(m);
        o.strides.resize(m);
        bool ok = true;
        for (size_t i = 0; ok && i < m; ++i) {
            ok = read_ints_into(PySequence_Fast_GET_ITEM(fs, static_cast<Py_ssize_t>(i)), o.shapes[i],
                                "override_shapes", i) &&
                 read_ints_into(PySequence_Fast_GET_ITEM(ft, static_cast<Py_ssize_t>(i)), o.strides[i],
                                "override_strides", i);
        }
        Py_DECREF(fs);
        Py_DECREF(ft);
        if (!ok) return nullptr;
        s.bytes.assign(bd.slot_bytes.begin(), bd.slot_bytes.end());
        for (size_t i = 0; i < m; ++i) {
            size_t idx = static_cast<size_t>(o.index[i]);
            const TensorSpec& t = d.tensors[idx];
            int64_t elems = 0;
            if (!check_entry(t, o.uids[i], o.shapes[i].data(), o.shapes[i].size(), o.strides[i].data(),
                             o.strides[i].size(), true, x.is_output[idx] != 0, &elems))
                return nullptr;
            int itemsize = itemsize_of(t.data_type);
            int64_t bytes = 0;
            s.bytes[bd.override_slot[i]] =
                __builtin_mul_overflow(elems, int64_t{itemsize ? itemsize : 1}, &bytes) ? -1 : bytes;
        }
    } else if (shapes != Py_None || strides != Py_None) {
        return raise(kInvalidValue, m ? "override strides given without override shapes"
                                       : "override values given, but no override uids were bound");
    }
    if ((o.size() || d.has_dynamic) && !check_effective(x, o, s.eff)) return nullptr;
    size_t n_written = bd.written_slots.size();
    const int64_t* bytes_now = o.size() ? s.bytes.data() : bd.slot_bytes.data();
    if ((n_written + 1) * (n + 1) <= 64) {
        if (!check_alias_few(d, s.buffers.data(), bytes_now, bd.slot_tensor.data(), bd.slot_written.data(),
                             bd.written_slots.data(), n_written, n, ws, d.workspace_size))
            return nullptr;
    } else {
        const std::vector<int64_t>& bytes = o.size() ? s.bytes : bd.slot_bytes;
        s.spans.clear();
        size_t written = 0;
        for (size_t i = 0; i < n; ++i)
            add_span(s.spans, &written, reinterpret_cast<uint64_t>(s.buffers[i].ptr), bytes[i], bd.slot_tensor[i],
                     bd.slot_written[i] != 0);
        if (ws && d.workspace_size)
            add_span(s.spans, &written, ws, static_cast<int64_t>(std::min<uint64_t>(d.workspace_size, INT64_MAX)), -1,
                     true);
        Span first, second;
        if (find_alias(s.spans.data(), s.spans.size(), written, &first, &second)) return raise_alias(d, first, second);
    }
    s.shape_ptrs.resize(o.size());
    s.stride_ptrs.resize(o.size());
    for (size_t k = 0; k < o.size(); ++k) {
        s.shape_ptrs[k] = o.shapes[k].data();
        s.stride_ptrs[k] = o.strides[k].data();
    }
    CallArgs a;
    a.workspace = reinterpret_cast<void*>(ws);
    a.buffers = s.buffers.data();
    a.num_buffers = static_cast<uint32_t>(n);
    a.num_overrides = static_cast<uint32_t>(o.size());
    a.override_uids = o.uids.data();
    a.lengths = bd.lengths.data();
    a.shapes = s.shape_ptrs.data();
    a.strides = s.stride_ptrs.data();
    if (!enter(d) || !call_plugin(d, a)) return nullptr;
    Py_RETURN_NONE;
}

PyObject* Binding_get_uids(PyObject* self, void*) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(bd.uids.size()));
    for (size_t i = 0; l && i < bd.uids.size(); ++i)
        PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bd.uids[i]));
    return l;
}

PyObject* Binding_get_override_uids(PyObject* self, void*) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(bd.override_uids.size()));
    for (size_t i = 0; l && i < bd.override_uids.size(); ++i)
        PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bd.override_uids[i]));
    return l;
}

PyGetSetDef Binding_getset[] = {
    {"uids", Binding_get_uids, nullptr, nullptr, nullptr},
    {"override_uids", Binding_get_override_uids, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject BindingType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Executor.bind(uids, override_uids) -> Binding. Everything that does not change per call is
// checked here, once.
PyObject* Executor_bind(PyObject* self, PyObject* args) {
    ExecutorData& x = *reinterpret_cast<Executor*>(self)->x;
    PlanData& d = *x.plan->d;
    PyObject *uids, *o_uids;
    if (!PyArg_ParseTuple(args, "OO", &uids, &o_uids)) return nullptr;
    auto* bd = new BindingData();
    auto fail = [bd]() -> PyObject* {
        delete bd;
        return nullptr;
    };
    PyObject* fu = PySequence_Fast(uids, "");
    if (!fu) {
        PyErr_Clear();
        raise(kInvalidValue, "bind: uids must be a sequence of tensors or uids");
        return fail();
    }
    std::vector<uint8_t> seen(d.tensors.size(), 0);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fu); ++i) {
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, PySequence_Fast_GET_ITEM(fu, i), KeyUse::kBind, &uid, &index, &tkey)) {
            Py_DECREF(fu);
            return fail();
        }
        if (index < 0) {
            Py_DECREF(fu);
            raise(kInvalidValue, tkey ? "bind: tensor (uid " + std::to_string(uid) + ") is not a tensor of this graph"
                                      : "bind: uid " + std::to_string(uid) + " is not a tensor of this graph");
            return fail();
        }
        const TensorSpec& t = d.tensors[static_cast<size_t>(index)];
        if (t.is_virtual) {
            Py_DECREF(fu);
            raise(kInvalidValue, "bind: tensor " + quoted(t.name) + " (uid " + std::to_string(uid) + ") is virtual");
            return fail();
        }
        if (seen[static_cast<size_t>(index)]) {
            Py_DECREF(fu);
            raise(kInvalidValue, "bind: a uid appears twice (uid " + std::to_string(uid) + ")");
            return fail();
        }
        seen[static_cast<size_t>(index)] = 1;
        bd->uids.push_back(uid);
        bd->slot_tensor.push_back(index);
        bool written = x.is_output[static_cast<size_t>(index)] != 0;
        bd->slot_written.push_back(written ? 1 : 0);
        if (written) bd->written_slots.push_back(bd->uids.size() - 1);
        int64_t bytes = -1;
        if (t.max_elements < 0 ||
            __builtin_mul_overflow(t.max_elements, int64_t{itemsize_of(t.data_type) ? itemsize_of(t.data_type) : 1},
                                   &bytes))
            bytes = -1;
        bd->slot_bytes.push_back(bytes);
    }
    Py_DECREF(fu);
    std::string missing;
    for (size_t t = 0; t < d.tensors.size(); ++t) {
        if (!d.tensors[t].is_virtual && !seen[t]) {
            if (!missing.empty()) missing += ", ";
            missing += quoted(d.tensors[t].name);
        }
    }
    if (!missing.empty()) {
        raise(kInvalidValue, "bind: no pointer slot for tensor(s) [" + missing + "]");
        return fail();
    }
    PyObject* fo = PySequence_Fast(o_uids, "");
    if (!fo) {
        PyErr_Clear();
        raise(kInvalidValue, "bind: override_uids must be a sequence of tensors or uids");
        return fail();
    }
    std::vector<uint8_t> oseen(d.tensors.size(), 0);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fo); ++i) {
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, PySequence_Fast_GET_ITEM(fo, i), KeyUse::kBind, &uid, &index, &tkey)) {
            Py_DECREF(fo);
            return fail();
        }
        if (index < 0 || d.tensors[static_cast<size_t>(index)].is_virtual) {
            Py_DECREF(fo);
            raise(kInvalidValue, "bind: uid " + std::to_string(uid) + " is not an overridable tensor of this graph");
            return fail();
        }
        if (oseen[static_cast<size_t>(index)]) {
            Py_DECREF(fo);
            raise(kInvalidValue, "bind: an override uid appears twice (uid " + std::to_string(uid) + ")");
            return fail();
        }
        oseen[static_cast<size_t>(index)] = 1;
        size_t slot = static_cast<size_t>(std::find(bd->slot_tensor.begin(), bd->slot_tensor.end(), index) -
                                          bd->slot_tensor.begin());
        bd->override_slot.push_back(slot);
        bd->override_uids.push_back(uid);
        bd->override_index.push_back(index);
        bd->lengths.push_back(static_cast<uint32_t>(d.tensors[static_cast<size_t>(index)].rank()));
    }
    Py_DECREF(fo);
    if (!bd->override_uids.empty()) {
        if (!d.override_enabled) {
            refuse_flagless(d);
            return fail();
        }
        if (!d.override_refusal.empty()) {
            raise(kGraphNotSupported, d.override_refusal);
            return fail();
        }
    }
    for (size_t t = 0; t < d.tensors.size(); ++t) {
        if (d.tensors[t].is_dynamic && !d.tensors[t].is_virtual && !oseen[t]) {
            raise(kInvalidValue, "bind: dynamic " + d.tensors[t].label +
                                     " needs an override at every call: list it in override_uids");
            return fail();
        }
    }
    Binding* b = PyObject_New(Binding, &BindingType);
    if (!b) return fail();
    b->b = bd;
    b->vectorcall = Binding_call;
    Py_INCREF(self);
    bd->executor = reinterpret_cast<Executor*>(self);
    return reinterpret_cast<PyObject*>(b);
}

PyObject* Executor_get_plan(PyObject* self, void*) {
    PyObject* p = reinterpret_cast<PyObject*>(reinterpret_cast<Executor*>(self)->x->plan);
    Py_INCREF(p);
    return p;
}

PyMethodDef Executor_methods[] = {
    {"execute", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Executor_execute)), METH_FASTCALL,
     "execute(variant_pack, workspace, override_uids, override_shapes, override_strides, overrides)"},
    {"bind", Executor_bind, METH_VARARGS, "bind(uids, override_uids) -> Binding"},
    {nullptr, nullptr, 0, nullptr},
};
PyGetSetDef Executor_getset[] = {
    {"plan", Executor_get_plan, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};
PyTypeObject ExecutorType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ============================================================================================
// module functions
// ============================================================================================
PyObject* mod_configure(PyObject*, PyObject* args, PyObject* kwargs) {
    static const char* kw[] = {"error_type", "error_codes", "ndarray_type", "np_integer_type", "tensor_type",
                               "entry_type", "mapping_abc", "resolver", "refusal_logger", "dtype_names",
                               "itemsizes", "torch_test", "torch_dtype_info", nullptr};
    PyObject *et, *ec, *nd, *ni, *tt, *ent, *ma, *res, *rl, *names, *sizes, *tq, *tdi;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OOOOOOOOOOO", const_cast<char**>(kw), &et, &PyDict_Type, &ec,
                                     &nd, &ni, &tt, &ent, &ma, &res, &rl, &names, &sizes, &tq, &tdi))
        return nullptr;
    PyObject** slots[] = {&g.error_type, &g.error_codes, &g.ndarray_type,   &g.np_integer_type,
                          &g.tensor_type, &g.entry_type, &g.mapping_abc,    &g.resolver,
                          &g.refusal_logger, &g.torch_test, &g.torch_dtype_info};
    PyObject* vals[] = {et, ec, nd, ni, tt, ent, ma, res, rl, tq, tdi};
    if (!g.torch_dtypes) g.torch_dtypes = PyDict_New();
    for (size_t i = 0; i < 11; ++i) {
        Py_XDECREF(*slots[i]);
        *slots[i] = vals[i] == Py_None ? nullptr : vals[i];
        Py_XINCREF(*slots[i]);
    }
    PyObject* fn = PySequence_Fast(names, "dtype_names must be a sequence");
    if (!fn) return nullptr;
    g.dtype_names.clear();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fn); ++i) {
        const char* c = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fn, i));
        if (!c) {
            Py_DECREF(fn);
            return nullptr;
        }
        g.dtype_names.push_back(c);
    }
    Py_DECREF(fn);
    std::vector<int64_t> s;
    if (!read_ints(sizes, s, "itemsizes")) return nullptr;
    g.itemsizes.assign(s.begin(), s.end());
    Py_RETURN_NONE;
}

// check_buffer(resolved, where, data_type, dims, strides, overridden): the buffer rule alone, for
// callers that hold a Resolved record (hipdnn.frontend.memory keeps its public helper on it).
PyObject* mod_check_buffer(PyObject*, PyObject* args) {
    PyObject *resolved, *dims, *strides;
    const char* where;
    int dt, overridden;
    if (!PyArg_ParseTuple(args, "OsiOOp", &resolved, &where, &dt, &dims, &strides, &overridden)) return nullptr;
    std::vector<int64_t> dv, sv;
    if (!read_ints(dims, dv, "dims") || !read_ints(strides, sv, "strides")) return nullptr;
    if (dv.size() != sv.size()) return raise(kInvalidValue, std::string(where) + ": dims and strides differ in rank");
    Buf b;
    if (resolved == Py_None) Py_RETURN_NONE;  // a bare pointer
    if (!buffer_from_record(resolved, where, b)) return nullptr;
    if (!check_buffer(b, where, dt, dv.data(), sv.data(), dv.size(), overridden != 0)) return nullptr;
    Py_RETURN_NONE;
}

// strides_overlap(dims, strides) -> bool: whether distinct indices share an element (layout_overlaps),
// for graph validation of the strides users declare on outputs: one rule, here and at execute.
PyObject* mod_strides_overlap(PyObject*, PyObject* args) {
    PyObject *dims, *strides;
    if (!PyArg_ParseTuple(args, "OO", &dims, &strides)) return nullptr;
    std::vector<int64_t> dv, sv;
    if (!read_ints(dims, dv, "dims") || !read_ints(strides, sv, "strides")) return nullptr;
    if (dv.size() != sv.size()) return raise(kInvalidValue, "dims and strides differ in rank");
    return PyBool_FromLong(layout_overlaps(dv.data(), sv.data(), dv.size()));
}

PyMethodDef module_methods[] = {
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_configure)),
     METH_VARARGS | METH_KEYWORDS, "Hand the core the Python objects it needs (once, at import)."},
    {"check_buffer", mod_check_buffer, METH_VARARGS, "The buffer rule for one Resolved value."},
    {"strides_overlap", mod_strides_overlap, METH_VARARGS, "Whether distinct indices of a layout share an element."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_execute_core", "The compiled execute path.", -1, module_methods,
                          nullptr, nullptr, nullptr, nullptr};

bool ready(PyTypeObject& t, const char* name, size_t size, destructor dealloc, newfunc new_fn, PyMethodDef* methods,
           PyGetSetDef* getset) {
    t.tp_name = name;
    t.tp_basicsize = static_cast<Py_ssize_t>(size);
    t.tp_flags = Py_TPFLAGS_DEFAULT;
    t.tp_dealloc = dealloc;
    t.tp_new = new_fn;
    t.tp_methods = methods;
    t.tp_getset = getset;
    return PyType_Ready(&t) == 0;
}

}  // namespace

PyMODINIT_FUNC PyInit__execute_core(void) {
    g.str_shape = PyUnicode_InternFromString("shape");
    g.str_stride = PyUnicode_InternFromString("stride");
    g.str_name = PyUnicode_InternFromString("get_name");
    g.str_uid = PyUnicode_InternFromString("get_uid");
    g.str_dtype = PyUnicode_InternFromString("dtype");
    g.str_is_cuda = PyUnicode_InternFromString("is_cuda");
    g.str_is_cpu = PyUnicode_InternFromString("is_cpu");
    g.str_data_ptr = PyUnicode_InternFromString("data_ptr");
    g.str_stride_fn = PyUnicode_InternFromString("stride");
    BindingType.tp_call = PyVectorcall_Call;
    BindingType.tp_vectorcall_offset = offsetof(Binding, vectorcall);
    if (!ready(GateType, "hipdnn.backend._execute_core.Gate", sizeof(Gate), nullptr, Gate_new, Gate_methods,
               Gate_getset) ||
        !ready(PlanCoreType, "hipdnn.backend._execute_core.PlanCore", sizeof(PlanCore), PlanCore_dealloc,
               PlanCore_new, PlanCore_methods, PlanCore_getset) ||
        !ready(ExecutorType, "hipdnn.backend._execute_core.Executor", sizeof(Executor), Executor_dealloc,
               Executor_new, Executor_methods, Executor_getset))
        return nullptr;
    BindingType.tp_name = "hipdnn.backend._execute_core.Binding";
    BindingType.tp_basicsize = sizeof(Binding);
    BindingType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    BindingType.tp_dealloc = Binding_dealloc;
    BindingType.tp_getset = Binding_getset;
    if (PyType_Ready(&BindingType) != 0) return nullptr;
    PyObject* m = PyModule_Create(&module_def);
    if (!m) return nullptr;
    PyTypeObject* types[] = {&GateType, &PlanCoreType, &ExecutorType, &BindingType};
    const char* names[] = {"Gate", "PlanCore", "Executor", "Binding"};
    for (int i = 0; i < 4; ++i) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], reinterpret_cast<PyObject*>(types[i])) != 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return nullptr;
        }
    }
    return m;
}
