// Objects shared between threads, freed by whoever drops the last reference: std::shared_ptr would make
// the binaries need glibc 2.32's __libc_single_threaded, beyond manylinux_2_28 (base/glibc_compat.hpp).
#pragma once

#include <atomic>
#include <utility>

namespace flinkgpu {

// The count a Ref keeps; a new object has one reference, the Ref it is first given to.
struct Counted {
    std::atomic<int> refs{1};
};

// A counted reference to a T derived from Counted (deleted as a T: one with subclasses has a virtual
// destructor).
template <typename T>
class Ref {
public:
    Ref() = default;
    explicit Ref(T* p) noexcept : p_(p) {}
    Ref(const Ref& o) noexcept : p_(o.p_) {
        if (p_ != nullptr) p_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    // A reference to a base of T.
    template <typename U>
    Ref(const Ref<U>& o) noexcept : p_(o.get()) {  // NOLINT(google-explicit-constructor): as U* to T*
        if (p_ != nullptr) p_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    Ref& operator=(Ref o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~Ref() {
        if (p_ != nullptr && p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    }
    void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
    // Gives up the reference without dropping it: another Ref(T*) adopts it.
    T* release() noexcept { return std::exchange(p_, nullptr); }
    T* get() const noexcept { return p_; }
    T* operator->() const noexcept { return p_; }
    T& operator*() const noexcept { return *p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    T* p_ = nullptr;
};

}  // namespace flinkgpu
