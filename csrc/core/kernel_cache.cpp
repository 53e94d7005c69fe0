#include "core/kernel_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/sha256.h"

namespace tunelab {
namespace {

constexpr char kMagic[8] = {'T', 'L', 'K', 'C', 'A', 'C', 'H', '1'};

void mkdirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i < path.size(); ++i) {
        cur += path[i];
        if (path[i] == '/' || i + 1 == path.size()) {
            if (cur.size() > 1) ::mkdir(cur.c_str(), 0755);
        }
    }
}

void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, const std::string& v) { put_u64(s, v.size()); s += v; }

struct Reader {
    const std::string& s;
    size_t pos = 0;
    bool ok = true;
    uint64_t u64() {
        if (pos + 8 > s.size()) { ok = false; return 0; }
        uint64_t v;
        std::memcpy(&v, s.data() + pos, 8);
        pos += 8;
        return v;
    }
    std::string str() {
        uint64_t n = u64();
        if (!ok || n > s.size() - pos) { ok = false; return {}; }
        std::string v = s.substr(pos, n);
        pos += n;
        return v;
    }
};

}  // namespace

std::string default_kernel_cache_dir() {
    if (const char* d = std::getenv("TUNELAB_CACHE_DIR"); d && *d) return std::string(d) + "/kernels";
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tunelab/kernels";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : "/tmp") + "/.cache/tunelab/kernels";
}

KernelCache::KernelCache(std::string dir) : dir_(dir.empty() ? default_kernel_cache_dir() : std::move(dir)) {}

std::string KernelCache::path_for(const std::string& key) const {
    return dir_ + "/" + key.substr(0, 2) + "/" + key + ".tlk";
}

KernelCache::Lookup KernelCache::load(const std::string& key, CompileResult& out) const {
    std::ifstream f(path_for(key), std::ios::binary);
    if (!f) return Lookup::Miss;
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Layout: magic | payload | sha256(payload) as 64 hex chars.
    if (data.size() < sizeof kMagic + 64 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
        return Lookup::Corrupt;
    std::string payload = data.substr(sizeof kMagic, data.size() - sizeof kMagic - 64);
    if (sha256_hex(payload) != data.substr(data.size() - 64)) return Lookup::Corrupt;
    Reader r{payload};
    if (r.str() != key) return Lookup::Corrupt;
    CompileResult res;
    res.arch = r.str();
    res.log = r.str();
    res.cubin = r.str();
    uint64_t n_opts = r.u64();
    for (uint64_t i = 0; r.ok && i < n_opts; ++i) res.options.push_back(r.str());
    uint64_t n_names = r.u64();
    for (uint64_t i = 0; r.ok && i < n_names; ++i) {
        std::string expr = r.str();
        res.lowered_names[expr] = r.str();
    }
    uint64_t n_res = r.u64();
    for (uint64_t i = 0; r.ok && i < n_res; ++i) {
        std::string name = r.str();
        ResourceUsage u;
        u.registers = int(r.u64());
        u.static_smem_bytes = int(r.u64());
        u.spill_store_bytes = int(r.u64());
        u.spill_load_bytes = int(r.u64());
        u.stack_bytes = int(r.u64());
        u.barriers = int(r.u64());
        u.constant_bytes = int(r.u64());
        res.resources[name] = u;
    }
    if (!r.ok || r.pos != payload.size() || res.cubin.empty()) return Lookup::Corrupt;
    res.key = key;
    out = std::move(res);
    return Lookup::Hit;
}

void KernelCache::store(const std::string& key, const CompileResult& result) const {
    std::string payload;
    put_str(payload, key);
    put_str(payload, result.arch);
    put_str(payload, result.log);
    put_str(payload, result.cubin);
    put_u64(payload, result.options.size());
    for (const auto& o : result.options) put_str(payload, o);
    put_u64(payload, result.lowered_names.size());
    for (const auto& [expr, name] : result.lowered_names) { put_str(payload, expr); put_str(payload, name); }
    put_u64(payload, result.resources.size());
    for (const auto& [name, u] : result.resources) {
        put_str(payload, name);
        for (int v : {u.registers, u.static_smem_bytes, u.spill_store_bytes, u.spill_load_bytes, u.stack_bytes,
                      u.barriers, u.constant_bytes})
            put_u64(payload, uint64_t(v));
    }
    std::string path = path_for(key);
    mkdirs(path.substr(0, path.rfind('/')));
    // Unique temp name per process and thread; rename() is atomic within one file system, so concurrent
    // writers of the same key simply race to install identical content.
    static std::atomic<unsigned> counter{0};
    std::ostringstream tmp;
    tmp << path << ".tmp." << ::getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id()) << "."
        << counter++;
    {
        std::ofstream f(tmp.str(), std::ios::binary | std::ios::trunc);
        if (!f) return;  // an unwritable cache costs a recompile next time, never a failure
        f.write(kMagic, sizeof kMagic);
        f.write(payload.data(), std::streamsize(payload.size()));
        std::string digest = sha256_hex(payload);
        f.write(digest.data(), std::streamsize(digest.size()));
        if (!f) { std::remove(tmp.str().c_str()); return; }
    }
    if (std::rename(tmp.str().c_str(), path.c_str()) != 0) std::remove(tmp.str().c_str());
}

}  // namespace tunelab
