// Kernel families add their bindings to tunelab._core by registering a function here, so module.cpp does not
// change when a family is added: `TUNELAB_REGISTER_BINDINGS(attention, bind_attention);`
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tunelab::bindings {

using BindFn = void (*)(pybind11::module_&);

inline std::vector<std::pair<std::string, BindFn>>& registry() {
    static std::vector<std::pair<std::string, BindFn>> r;
    return r;
}

struct Registrar {
    Registrar(const char* name, BindFn fn) { registry().emplace_back(name, fn); }
};

}  // namespace tunelab::bindings

#define TUNELAB_REGISTER_BINDINGS(name, fn) \
    static ::tunelab::bindings::Registrar tunelab_registrar_##name(#name, fn)
