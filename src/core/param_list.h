// The table of every knob Ferry reads: X(id, NAME, type, default, description).
// This is the single source for the registry, `ferry-run --params` and the
// README's table (tests/unit/params_test checks that README lists each name).
// Types: Int (64-bit, decimal or 0x hex; K/M/G suffixes allowed), Bool (0/1),
// String.
// clang-format off
#define FERRY_PARAM_LIST(X)                                                                       \
  X(Debug, "NCCL_DEBUG", String, "", "Log level: VERSION, WARN, INFO or TRACE.")                  \
  X(DebugSubsys, "NCCL_DEBUG_SUBSYS", String, "INIT,BOOTSTRAP,ENV",                               \
    "Subsystems logged at INFO/TRACE, comma list; leading ^ excludes.")                           \
  X(DebugFile, "NCCL_DEBUG_FILE", String, "", "Log file instead of stderr; %h host, %p pid.")     \
  X(CommId, "NCCL_COMM_ID", String, "",                                                           \
    "host:port of the bootstrap root; rank 0 listens there instead of ncclGetUniqueId's root.")   \
  X(SocketIfname, "NCCL_SOCKET_IFNAME", String, "",                                               \
    "Interfaces for bootstrap: prefix list, ^ excludes, = exact. Default: any but lo/docker, "    \
    "then lo.")                                                                                   \
  X(SocketFamily, "NCCL_SOCKET_FAMILY", String, "", "AF_INET or AF_INET6 to restrict addresses.") \
  X(CommBlocking, "NCCL_COMM_BLOCKING", Int, "1",                                                 \
    "Default of ncclConfig_t.blocking when the config leaves it undefined.")                      \
  X(Runtime, "FERRY_RUNTIME", String, "auto",                                                     \
    "auto, cuda or host: which runtime a communicator uses (auto: cuda if a GPU is visible).")    \
  X(HostDevices, "FERRY_HOST_DEVICES", Int, "8", "Number of devices the host runtime emulates.")  \
  X(BootstrapTimeout, "FERRY_BOOTSTRAP_TIMEOUT", Int, "120",                                      \
    "Seconds a bootstrap wait (init, all-gather, barrier) may take before failing.")              \
  X(BootstrapStagger, "FERRY_BOOTSTRAP_STAGGER_RANKS", Int, "128",                                \
    "Above this many ranks, connects to the root are staggered in time.")                        \
  X(RunTimeout, "FERRY_RUN_TIMEOUT", Int, "0",                                                    \
    "ferry-run: seconds before all ranks are killed (exit 124) when --timeout is not given; "     \
    "0: none.")
// clang-format on
