// The only place Ferry reads the process environment. Everything else asks the
// param registry (core/params.h), which snapshots these values at communicator
// init; the logger reads its NCCL_DEBUG* variables here directly because
// it must work before any communicator exists.
#pragma once

#include <string>

namespace ferry {

// Value of `name`, or "" when unset.
std::string envString(const char* name);
bool envIsSet(const char* name);

}  // namespace ferry
