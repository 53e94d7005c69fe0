#include "launchers/config.h"

#include <algorithm>
#include <sstream>

#include "core/errors.h"

namespace tunelab::launchers {

std::string join(const std::vector<long long>& v) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    s << "]";
    return s.str();
}

std::string join_names(const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s + "]";
}

void config_error(const char* family, const std::string& msg) {
    throw ConfigError(std::string(family) + " config: " + msg);
}

// Name/value checks shared by both families: every parameter present, known, and one of its choices.
std::map<std::string, int> checked(const char* family, const Config& config, const std::vector<std::string>& names,
                                   const std::map<std::string, std::vector<long long>>& choices) {
    for (const auto& [key, value] : config) {
        if (std::find(names.begin(), names.end(), key) == names.end())
            config_error(family, "unknown parameter '" + key + "'; the parameters are " + join_names(names));
    }
    std::map<std::string, int> v;
    for (const auto& name : names) {
        auto it = config.find(name);
        if (it == config.end())
            config_error(family, "missing parameter '" + name + "'; the parameters are " + join_names(names));
        const auto& ok = choices.at(name);
        if (std::find(ok.begin(), ok.end(), it->second) == ok.end())
            config_error(family, name + "=" + std::to_string(it->second) + " is not accepted; accepted values are " +
                                     join(ok));
        v[name] = static_cast<int>(it->second);
    }
    return v;
}

}  // namespace tunelab::launchers
