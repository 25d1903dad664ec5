#include "base/event.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace flinkgpu {

long long monotonic_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

bool Event::wait_until(long long until_ns) noexcept {
    for (;;) {
        std::uint32_t state = state_.load(std::memory_order_acquire);
        if (state == kSet) return true;
        if (state == kUnset && !state_.compare_exchange_strong(state, kWaiting, std::memory_order_acquire))
            continue;  // set meanwhile: look again
        if (monotonic_ns() >= until_ns) return state_.load(std::memory_order_acquire) == kSet;
        timespec until{};
        until.tv_sec = static_cast<time_t>(until_ns / 1000000000LL);
        until.tv_nsec = static_cast<long>(until_ns % 1000000000LL);
        // returns when woken, at the deadline, on a signal, or at once when no longer kWaiting
        syscall(SYS_futex, word(), FUTEX_WAIT_BITSET_PRIVATE, kWaiting, &until, nullptr, FUTEX_BITSET_MATCH_ANY);
    }
}

void Event::set() noexcept {
    if (state_.exchange(kSet, std::memory_order_acq_rel) == kWaiting)
        syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace flinkgpu
