// One thread waits until another sets an event: a futex word, so that a hand-off costs one wait and one
// wake (a condition variable's waiter takes its mutex back marked contended, and the unlock after it
// makes one more system call that wakes nobody). The setter wakes only a waiter that sleeps. Deadlines
// are CLOCK_MONOTONIC (FUTEX_WAIT_BITSET): a wall-clock step neither shortens nor extends a wait.
#pragma once

#include <atomic>
#include <cstdint>

namespace flinkgpu {

// CLOCK_MONOTONIC now, in nanoseconds: the clock of Event's deadlines.
long long monotonic_ns() noexcept;

// Whoever calls set() keeps the event alive until it returns.
class Event {
public:
    // Whether it is set, once set or at `until_ns` (monotonic_ns()).
    bool wait_until(long long until_ns) noexcept;
    void set() noexcept;
    // For the next wait; only while no set() can come.
    void reset() noexcept { state_.store(kUnset, std::memory_order_relaxed); }

private:
    static constexpr std::uint32_t kUnset = 0, kWaiting = 1, kSet = 2;
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word");
    std::uint32_t* word() noexcept { return reinterpret_cast<std::uint32_t*>(&state_); }  // for the kernel only
    std::atomic<std::uint32_t> state_{kUnset};
};

}  // namespace flinkgpu
