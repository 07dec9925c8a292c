#include "overlay/error.hpp"

#include <cstring>

namespace overlay {

DiskError::DiskError(const std::string& op, const std::string& path, int err)
    : Error(op + " " + path + ": " + std::strerror(err)), err_(err) {}

}  // namespace overlay
