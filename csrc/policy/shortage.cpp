#include "policy/shortage.hpp"

namespace flinkgpu {
namespace policy {

std::string shortage_sentence(std::string_view amount, std::size_t usable, std::size_t total, std::string_view counted,
                              const coordination::LeftOut& left_out) {
    std::string text = std::string(amount) + (amount == "1" ? " GPU" : " GPUs") + " requested, but " +
                       std::to_string(usable) + " of the " + std::to_string(total) + " " + std::string(counted) +
                       (usable == 1 ? " is" : " are") + " usable";
    const char* separator = ": ";
    for (const auto& [index, why] : left_out) {
        text += separator + ("GPU " + index) + " is left out (" + why + ")";
        separator = "; ";
    }
    return text + ".";
}

std::string left_out_text(const std::string& index, const std::string& why) {
    return "GPU " + index + " left out: " + why;
}

}  // namespace policy
}  // namespace flinkgpu
