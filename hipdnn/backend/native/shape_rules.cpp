// The nodes' shape rules, parsed once at build and run on each call's effective shapes.
#include "core.h"

namespace hipdnn_core {

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

// The rule spec is read from private tuples (strong references to every item): converting an int
// runs its __index__, which may empty the caller's lists and free the items, and the strings, read.
bool parse_refs(PyObject* seq, std::vector<Ref>& out, const PlanData& d) {
    PyObject* fast = PySequence_Tuple(seq);
    if (!fast) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fast); ++i) {
        Ref r{0, 0};
        if (!parse_ref(PyTuple_GET_ITEM(fast, i), r, d)) {
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
    PyObject* fast = PySequence_Tuple(spec);
    if (!fast) return false;
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(fast); ++i) {
        const char *prefix, *name;
        Py_ssize_t prefix_len, name_len;
        PyObject* rules;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fast, i), "s#s#O", &prefix, &prefix_len, &name, &name_len,
                              &rules)) {
            ok = false;
            break;
        }
        NodeRules node;
        node.prefix.assign(prefix, static_cast<size_t>(prefix_len));
        node.name.assign(name, static_cast<size_t>(name_len));
        PyObject* rf = PySequence_Tuple(rules);
        if (!rf) {
            ok = false;
            break;
        }
        for (Py_ssize_t k = 0; ok && k < PyTuple_GET_SIZE(rf); ++k) {
            PyObject* item = PyTuple_GET_ITEM(rf, k);
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
                PyObject* ef = PySequence_Tuple(exprs);
                if (!ef) {
                    ok = false;
                    break;
                }
                for (Py_ssize_t a = 0; ok && a < PyTuple_GET_SIZE(ef); ++a) {
                    PyObject* ex = PyTuple_GET_ITEM(ef, a);
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

}  // namespace hipdnn_core
