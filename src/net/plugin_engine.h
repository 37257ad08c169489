// Internal to the plugin loader (net/plugin.cc): the owner of a dlopen
// handle, and the NetEngine adapters over ncclNet_v6 .. ncclNet_v11 tables
// (net/plugin_engine.cc). Callers outside net/ use net/plugin.h.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/status.h"
#include "net/net.h"
#include "net/plugin.h"
#include "net/plugin_abi.h"

namespace ferry::net {

// A handle from dlopen, dlclose'd when the owner goes away. Move-only.
class SharedLibrary {
 public:
  SharedLibrary() = default;
  explicit SharedLibrary(void* handle) : handle_(handle) {}
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& other) noexcept : handle_(other.handle_) {
    other.handle_ = nullptr;
  }
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  void* get() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// A NetEngine over one plugin table, plus what the loader needs before
// handing it out. The engine owns the library, so the table and every
// function in it stay mapped while the engine lives.
class PluginNetEngine : public NetEngine {
 public:
  virtual int version() const = 0;
  // Checks the table and calls the plugin's init (for v6..v10 only when no
  // other engine of this library has). Until it succeeds only name() may be
  // called; a failed engine is simply destroyed.
  [[nodiscard]] virtual Status start() = 0;
  // The offload kind device `dev` asks for (abi::NCCL_NET_DEVICE_*).
  [[nodiscard]] virtual Status offloadType(int dev, int* type) = 0;

  // Where the library was found (for logs); set by the loader.
  const std::string& libraryPath() const { return libraryPath_; }
  void setLibraryPath(std::string path) { libraryPath_ = std::move(path); }

 private:
  std::string libraryPath_;
};

// The adapter for `table`, the ncclNetPlugin_v<version> symbol found in
// `lib`; null for a version outside 6..11.
std::unique_ptr<PluginNetEngine> makePluginNetEngine(int version, const void* table,
                                                     SharedLibrary lib,
                                                     const NetPluginInitArgs& args);

// The logger every plugin gets: each line goes to Ferry's logger at the
// matching level (WARN and ABORT as WARN), with the plugin's subsystem flags
// and source location. Never throws.
void pluginLogger(abi::ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                  const char* fmt, ...) __attribute__((format(printf, 5, 6)));

}  // namespace ferry::net
