#include "core/timer.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/device.h"
#include "core/driver.h"
#include "core/errors.h"
#include "core/launch_graph.h"

namespace tunelab {
namespace {

struct FlushBuffer {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
};

// One flush buffer per device, allocated on first use and kept for the life of the process.
FlushBuffer& flush_buffer(int device) {
    static std::mutex mu;
    static std::map<int, FlushBuffer> buffers;
    std::lock_guard<std::mutex> lock(mu);
    FlushBuffer& b = buffers[device];
    if (!b.ptr) {
        DeviceInfo info = device_info(device);
        // Twice the L2 (and at least 64 MiB) so that no line of the kernel's inputs survives the flush.
        b.bytes = size_t(std::max<long long>(2 * info.l2_bytes, 64ll << 20));
        check(driver().cuMemAlloc(&b.ptr, b.bytes), "cuMemAlloc(L2 flush buffer)");
    }
    return b;
}

struct Events {
    std::vector<CUevent> ev;
    explicit Events(size_t n) : ev(n, nullptr) {
        for (auto& e : ev) check(driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    }
    ~Events() {
        for (auto e : ev)
            if (e) driver().cuEventDestroy(e);
    }
};

}  // namespace

long long l2_flush_bytes() { return (long long)flush_buffer(ensure_context()).bytes; }

std::vector<double> time_launches(const LaunchFn& launch, CUstream stream, const TimerOptions& opt,
                                  const LaunchFn& prepare) {
    if (opt.samples < 1) throw ConfigError("samples = " + std::to_string(opt.samples) + " must be at least 1");
    if (opt.warmup < 0) throw ConfigError("warmup = " + std::to_string(opt.warmup) + " must be >= 0");
    if (opt.graph_launches < 0)
        throw ConfigError("graph_launches = " + std::to_string(opt.graph_launches) + " must be >= 0 (0: no graph)");
    const int device = ensure_context();
    const DriverApi& d = driver();
    FlushBuffer* flush = opt.flush_l2 ? &flush_buffer(device) : nullptr;
    auto do_flush = [&] {
        if (flush) check(d.cuMemsetD32Async(flush->ptr, 0x5a5a5a5a, flush->bytes / 4, stream), "cuMemsetD32Async");
    };

    CUgraphExec exec = nullptr;
    struct ExecGuard {
        CUgraphExec& e;
        ~ExecGuard() { destroy_graph(e); }
    } guard{exec};

    for (int i = 0; i < opt.warmup; ++i) launch(stream);
    if (opt.graph_launches > 0) {
        // Captured on a private stream (the legacy default stream, torch's usual one, cannot be captured) and
        // replayed on the caller's (capture_graph, relaxed mode: unrelated CUDA work in a launch closure cannot
        // break it).
        check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");  // warm-up done before capture
        exec = capture_graph([&](CUstream capture) {
            for (int i = 0; i < opt.graph_launches; ++i) launch(capture);
        });
        check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");  // warm the graph itself
    }

    Events events(size_t(2 * opt.samples));
    for (int s = 0; s < opt.samples; ++s) {
        do_flush();
        if (prepare) prepare(stream);
        check(d.cuEventRecord(events.ev[2 * s], stream), "cuEventRecord");
        if (exec) check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
        else launch(stream);
        check(d.cuEventRecord(events.ev[2 * s + 1], stream), "cuEventRecord");
    }
    check(d.cuEventSynchronize(events.ev.back()), "cuEventSynchronize");
    std::vector<double> out(size_t(opt.samples));
    const double per = exec ? 1000.0 / opt.graph_launches : 1000.0;  // ms -> µs, per launch
    for (int s = 0; s < opt.samples; ++s) {
        float ms = 0.f;
        check(d.cuEventElapsedTime(&ms, events.ev[2 * s], events.ev[2 * s + 1]), "cuEventElapsedTime");
        out[size_t(s)] = double(ms) * per;
    }
    return out;
}

}  // namespace tunelab
