// What every launcher does with a config (tunable name -> value): check it against the family's tunables,
// and print lists for error messages that name the accepted values.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tunelab::launchers {

using Config = std::map<std::string, long long>;

std::string join(const std::vector<long long>& values);
std::string join_names(const std::vector<std::string>& names);

// Throws ConfigError "<family> config: <msg>".
[[noreturn]] void config_error(const char* family, const std::string& msg);

// Every parameter present, known, and one of its choices; ConfigError "<family> config: ..." naming the bad
// value and the accepted ones otherwise. Returns the values as ints.
std::map<std::string, int> checked(const char* family, const Config& config, const std::vector<std::string>& names,
                                   const std::map<std::string, std::vector<long long>>& choices);

}  // namespace tunelab::launchers
