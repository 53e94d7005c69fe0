// C++ side of tunelab's exception hierarchy. The bindings translate each class into the Python class of the
// same name in tunelab.errors, so a C++ failure reaches the user as a TunelabError with the same fields.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tunelab {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct CompileError : Error {
    CompileError(const std::string& message, std::string log, std::vector<std::string> options)
        : Error(message), log(std::move(log)), options(std::move(options)) {}
    std::string log;
    std::vector<std::string> options;
};

struct DriverError : Error {
    DriverError(const std::string& message, std::string call, int code)
        : Error(message), call(std::move(call)), code(code) {}
    std::string call;
    int code;
};

// No libcuda, or no device: compiling and static occupancy still work, GPU operations do not.
struct NoDeviceError : DriverError {
    using DriverError::DriverError;
};

// A sticky error (illegal address, trap, ...): the process's context is unusable from now on.
struct PoisonedContextError : DriverError {
    using DriverError::DriverError;
};

struct ConfigError : Error {
    using Error::Error;
};

// A tensor or scalar argument a kernel cannot take (alignment, sizes, scale): tunelab.errors.InputError.
struct InputError : Error {
    using Error::Error;
};

}  // namespace tunelab
