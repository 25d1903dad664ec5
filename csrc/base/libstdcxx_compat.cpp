// gcc >= 11 makes std::allocator call std::__throw_bad_array_new_length(), which the libstdc++ of
// manylinux_2_28 (GLIBCXX_3.4.24) does not export. A private definition here satisfies those
// calls inside our binaries (hidden visibility: nothing is exported), so the wheel keeps to the
// libstdc++ ABI that manylinux_2_28 guarantees. Same behaviour as libstdc++'s own definition.
#include <new>

namespace std {
[[noreturn]] __attribute__((visibility("hidden"))) void __throw_bad_array_new_length() {
    throw std::bad_array_new_length();
}
}  // namespace std
