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
  X(DebugStampLevels, "NCCL_DEBUG_TIMESTAMP_LEVELS", String, "WARN",                              \
    "Log levels whose lines start with the local time: comma list of VERSION,WARN,INFO,TRACE,ALL; " \
    "leading ^ inverts.")                                                                         \
  X(DebugStampFormat, "NCCL_DEBUG_TIMESTAMP_FORMAT", String, "[%F %T] ",                          \
    "strftime format of that time; %Nf (N = 1..9) is the second's fraction to N digits.")        \
  X(CommId, "NCCL_COMM_ID", String, "",                                                           \
    "host:port of the bootstrap root; rank 0 listens there instead of ncclGetUniqueId's root.")   \
  X(SocketIfname, "NCCL_SOCKET_IFNAME", String, "",                                               \
    "Interfaces for bootstrap: prefix list, ^ excludes, = exact. Default: any but lo/docker, "    \
    "then lo.")                                                                                   \
  X(SocketFamily, "NCCL_SOCKET_FAMILY", String, "", "AF_INET or AF_INET6 to restrict addresses.") \
  X(Net, "NCCL_NET", String, "",                                                                  \
    "Network engine for peers on other hosts: Socket (built-in) or a net plugin's name; empty: "  \
    "the plugin when one loads, else Socket.")                                                    \
  X(NetPlugin, "NCCL_NET_PLUGIN", String, "",                                                      \
    "Net plugin libraries, a comma list tried in order (as NCCL 2.28): each entry as written, "   \
    "then libnccl-net-<entry>.so unless it is a path or lib*.so; unset or empty: libnccl-net.so " \
    "if present; none: no plugin.")                                                              \
  X(SocketNthreads, "NCCL_SOCKET_NTHREADS", Int, "0",                                             \
    "Socket engine: helper threads per connection (1..16; 0: 4).")                                \
  X(NsocksPerthread, "NCCL_NSOCKS_PERTHREAD", Int, "0",                                           \
    "Socket engine: TCP streams per helper thread (1..16, threads x this <= 64; 0: 2).")          \
  X(NetChunkBytes, "FERRY_NET_CHUNK_BYTES", Int, "1M",                                          \
    "Point-to-point across hosts: messages travel in chunks of this size (4K..1G; every rank "   \
    "must set the same).")                                                                       \
  X(NetLinks, "FERRY_NET_LINKS", Int, "0",                                                        \
    "Point-to-point across hosts: engine connections (links) per peer and direction that a "      \
    "message's chunks are striped over (1..8; 0: 2 on CUDA, 1 on the host runtime; every rank "   \
    "must set the same).")                                                                        \
  X(NetGdr, "FERRY_NET_GDR", Int, "0",                                                            \
    "1: where every link's network engine takes device memory (a net plugin with NCCL_PTR_CUDA: " \
    "GPUDirect RDMA), point-to-point messages of more than one chunk go between the user's "       \
    "buffer and the network directly (each allocation registered once, at most 64 per "          \
    "connection); a direct send's stream then waits until the network has taken the message. "    \
    "0: always through pinned host staging (the default until measured on GPUDirect hardware).") \
  X(NetStagingWaitUs, "FERRY_NET_STAGING_WAIT_US", Int, "2000",                                   \
    "Point-to-point across hosts: a send whose connection already holds 4 staging blocks of its " \
    "size, all busy, waits for one to free while the network keeps taking the connection's "     \
    "chunks, and pins another once this long plus 250 us per MiB of the message passed with "    \
    "none taken (0: never wait).")                                                               \
  X(NetStagingMax, "FERRY_NET_STAGING_MAX_BYTES", Int, "4G",                                      \
    "Point-to-point across hosts: soft cap on a communicator's pinned send staging. Past it, a "  \
    "send that would pin another block first waits up to FERRY_NET_STAGING_CAP_WAIT_MS for its " \
    "connection's oldest busy block, whether the network moves or not (the sender's own busy "   \
    "stream may hold it back), then pins one anyway (WARN once). 0: no cap.")                     \
  X(NetStagingCapWaitMs, "FERRY_NET_STAGING_CAP_WAIT_MS", Int, "1000",                            \
    "How long a send across hosts waits past FERRY_NET_STAGING_MAX_BYTES before pinning another " \
    "block anyway: a bound, so that a sender whose blocks free only after its own later calls "  \
    "never hangs.")                                                                              \
  X(NetHelperSpinUs, "FERRY_NET_HELPER_SPIN_US", Int, "-1",                                     \
    "Socket engine: a helper thread keeps polling its sockets and its queue this many us after "  \
    "its last progress before it sleeps, so the next chunk needs no wake-up (a sleeping thread "  \
    "on an idle core can take tens of us to run again); costs that much CPU per burst. 0: sleep " \
    "at once; -1: 500 where the process may use 16 CPUs or more, else 0.")                       \
  X(NetSharedHelpers, "FERRY_NET_SHARED_HELPERS", Int, "-1",                                      \
    "Socket engine: N > 0 gives the process N helper threads shared by every connection (each "   \
    "connection's NCCL_SOCKET_NTHREADS socket groups spread over them); 0: helper threads of "    \
    "each connection's own (NCCL's shape); -1: a quarter of the process's CPUs, 2..8. Up to 64.") \
  X(ProxySpinUs, "FERRY_PROXY_SPIN_US", Int, "1000",                                              \
    "While network transfers or ring hops across hosts are active, the proxy thread polls "    \
    "them without sleeping, yielding the CPU between passes, until this many us pass with "     \
    "nothing moved or launched; then it naps 20-200 us between passes until a launch wakes it. " \
    "0: nap at once (less CPU, more latency).")                                                 \
  X(HostId, "NCCL_HOSTID", String, "",                                                            \
    "The host this rank believes it is on (default: the machine's own identity); ranks with "     \
    "different values use the network between them, so one machine can emulate several hosts.") \
  X(CommBlocking, "NCCL_COMM_BLOCKING", Int, "1",                                                 \
    "Default of ncclConfig_t.blocking when the config leaves it undefined.")                      \
  X(MaxCtas, "NCCL_MAX_CTAS", Int, "0",                                                           \
    "Default of ncclConfig_t.maxCTAs: at most this many thread blocks (channels) per collective " \
    "kernel, 1..64. 0: NCCL_MAX_NCHANNELS if set, else 64.")                                     \
  X(MaxNchannels, "NCCL_MAX_NCHANNELS", Int, "0",                                                  \
    "Older name of NCCL_MAX_CTAS (used when NCCL_MAX_CTAS is not set).")                         \
  X(MinCtas, "NCCL_MIN_CTAS", Int, "0",                                                           \
    "Default of ncclConfig_t.minCTAs (accepted and validated; Ferry sizes launches by bytes).")   \
  X(Proto, "NCCL_PROTO", String, "",                                                               \
    "Collective protocols allowed: comma list of LL, LL128, Simple (case-insensitive); leading ^ " \
    "excludes. Ferry has LL and Simple; LL128 is accepted and ignored. Empty: by size.")         \
  X(Algo, "NCCL_ALGO", String, "",                                                                \
    "Collective algorithms allowed: comma list (leading ^ excludes), optionally per collective "  \
    "as allreduce:tree;allgather:ring. Ring; Tree (Ferry: hierarchical all-reduce across hosts); " \
    "others accepted and ignored. Empty: Ferry's cost model chooses.")                            \
  X(Runtime, "FERRY_RUNTIME", String, "auto",                                                     \
    "auto, cuda or host: which runtime a communicator uses (auto: cuda if a GPU is visible).")    \
  X(HostDevices, "FERRY_HOST_DEVICES", Int, "8", "Number of devices the host runtime emulates.")  \
  X(HostHugePages, "FERRY_HOST_HUGE_PAGES", Bool, "1",                                             \
    "1: pinned host blocks of 4 MiB or more (staging across hosts, ring mirrors) are 2 MiB pages " \
    "registered with CUDA where transparent huge pages may be asked for (faster to pin and free " \
    "than cudaHostAlloc); 0: cudaHostAlloc for every block.")                                     \
  X(BootstrapTimeout, "FERRY_BOOTSTRAP_TIMEOUT", Int, "120",                                      \
    "Seconds a bootstrap wait (init, all-gather, barrier) may take before failing.")              \
  X(BootstrapStagger, "FERRY_BOOTSTRAP_STAGGER_RANKS", Int, "128",                                \
    "Above this many ranks, connects to the root are staggered in time.")                        \
  X(RunTimeout, "FERRY_RUN_TIMEOUT", Int, "0",                                                    \
    "ferry-run: seconds before all ranks are killed (exit 124) when --timeout is not given; "     \
    "0: none.") \
  X(PassSm, "NCCL_PASS_SM", Int, "1",                                                           \
    "1: point-to-point runs SM-free (copy engines driven by the proxy thread). 0: kernel p2p "  \
    "(send/recv copied by GPU kernels over the collective connections).")                        \
  X(P2pDisable, "NCCL_P2P_DISABLE", Int, "0",                                                     \
    "1: never use peer GPU memory (P2P/IPC); same-host peers then use host shared memory (SHM).")  \
  X(ShmDisable, "NCCL_SHM_DISABLE", Int, "0", "1: never use the host shared-memory transport.")    \
  X(P2pZeroCopy, "FERRY_P2P_ZERO_COPY", Int, "1",                                                  \
    "1: the side that arrives second copies straight from or into the first side's buffer when "  \
    "it can be mapped (one copy per byte); 0: always through a staging block (two copies).")     \
  X(P2pSelfCopy, "FERRY_P2P_SELF_COPY", Int, "1",                                                 \
    "1: a group's sends to self and receives from self (e.g. all-to-all's own block) become one " \
    "stream-ordered copy each when they pair up one to one, beside the peers' copies; 2: the "    \
    "same, after the peers' messages (less HBM traffic at once: compute beside it loses less, "   \
    "the all-to-all takes longer); 3: in pieces between those of the peer copy on the user "      \
    "stream (one peer copy there), else as 2; 0: through the proxy like any peer.")              \
  X(P2pSelfCopyRows, "FERRY_P2P_SELF_COPY_ROWS", Int, "4096",                                    \
    "> 0: a self copy of at least 32 rows (FERRY_P2P_SELF_COPY 1-2, and 3 outside its pieces) "  \
    "runs as two strided copies of rows of this many bytes (even rows, then odd; a multiple of "  \
    "16 in 64..1M): compute beside an all-to-all loses much less that way, at about the same "   \
    "all-to-all speed (NOTES.md trap 71); 0: one plain copy.")                                    \
  X(P2pUserStreamCopy, "FERRY_P2P_USER_STREAM_COPY", Int, "1",                                   \
    "1: a launch's only copy as the second side on a user stream that waits for it anyway runs "  \
    "on that stream instead of its connection's copy stream (4 fewer CUDA calls per message); "   \
    "0: on the connection's stream.")                                  \
  X(UserWait, "FERRY_USER_WAIT", String, "auto",                                                  \
    "How a user stream waits for SM-free completion: memop (cuStreamWaitValue, zero SMs; the "    \
    "spin kernel still on the legacy NULL stream and with CUDA_DEVICE_MAX_CONNECTIONS=1), kernel " \
    "(a one-thread spin kernel: one warp, ~3 us more CPU per wait), auto (memop).")               \
  X(P2pStageSends, "FERRY_P2P_STAGE_SENDS", String, "auto",                                        \
    "1: a send that arrives before its receiver copies its payload to a staging block on its "    \
    "own stream and never waits for the receiver; 0: never; auto: on CUDA under lazy loading.")   \
  X(P2pStagingMax, "FERRY_P2P_STAGING_MAX_BYTES", Int, "1G",                                     \
    "Soft cap on a communicator's staging blocks for sends staged under lazy loading: past it, "  \
    "a send that needs a new block waits up to FERRY_P2P_STAGING_WAIT_MS for its receiver to "    \
    "post or a block to free, then grows the pool anyway (WARN once). Under it, the wait is at "  \
    "most 2 ms. A message larger than the cap still gets its block.")                           \
  X(P2pStagingWait, "FERRY_P2P_STAGING_WAIT_MS", Int, "20",                                       \
    "How long a staged send waits (CPU) past FERRY_P2P_STAGING_MAX_BYTES before growing the "     \
    "pool anyway (a bound, so that unbatched sends ahead of their receives never hang).")         \
  X(P2pPushWait, "FERRY_P2P_PUSH_WAIT_US", Int, "500",                                           \
    "A send of >= 1 MiB to another process that would arrive before its receiver, in an "        \
    "exchange (the group also receives from that peer) or under lazy loading (it would be "      \
    "staged), waits on the CPU up to min(this, its size at 400 GB/s) us (this whole bound while " \
    "its stream is busy: FERRY_P2P_PUSH_WAIT_BUSY) for the receiver to post, so it pushes "      \
    "straight from its buffer; after 3 misses in a row on a connection, "                         \
    "only every 8th message waits; a launch's waits share one such bound; 0: never.")          \
  X(P2pPushRetryMax, "FERRY_P2P_PUSH_RETRY_MAX", Int, "8",                                       \
    "A connection whose receiver missed 3 push waits in a row waits again only every Nth "        \
    "message; N starts at 8 and doubles after each retry that misses again, up to this (8: "     \
    "every 8th, fixed); a wait that finds its receiver resets it.")                               \
  X(P2pStagingGrowWait, "FERRY_P2P_STAGING_GROW_WAIT_US", Int, "2000",                          \
    "Under FERRY_P2P_STAGING_MAX_BYTES, how long a staged send that needs a new block waits "     \
    "(CPU) for its receiver to post or a block to free before the pool grows; 0: grow at once.") \
  X(P2pPushWaitStaged, "FERRY_P2P_PUSH_WAIT_STAGED", Int, "1",                                  \
    "1: under lazy loading a send that would be staged waits (FERRY_P2P_PUSH_WAIT_US) even when " \
    "it is not part of an exchange; 0: only exchanges wait (a pipeline's sends stage at once).")  \
  X(P2pPushWaitMin, "FERRY_P2P_PUSH_WAIT_MIN_US", Int, "0",                                      \
    "The push wait's bound is at least this many us (never above FERRY_P2P_PUSH_WAIT_US): at 4-8 " \
    "MiB its size at 400 GB/s (10-21 us) may be shorter than the time between two ranks' "       \
    "claims; 0: the size-based bound only.")                                                      \
  X(P2pPushWaitBusy, "FERRY_P2P_PUSH_WAIT_BUSY", Int, "1",                                       \
    "1: a push wait whose user stream still runs work of an earlier launch on this communicator " \
    "(the GPU is busy: waiting costs it nothing) waits up to FERRY_P2P_PUSH_WAIT_US, whatever "   \
    "the size; 2: the same, but a wait ends at the size-based bound once that stream's work has " \
    "passed (it never idles the GPU); 0: the size-based bound always.")                          \
  X(Profile, "FERRY_PROFILE", Int, "0",                                                          \
    "1: time the CPU's parts of every launch (group end, collective, kernel p2p, SM-free "      \
    "phases) per communicator; printed at destroy/abort (INFO, subsystem INIT or P2P).")        \
  X(P2pTimeout, "FERRY_P2P_TIMEOUT", Int, "1800",                                                  \
    "Seconds an SM-free message may wait for its peer before failing (0: no limit).")           \
  X(P2pKernelMaxBytes, "FERRY_P2P_KERNEL_MAX_BYTES", Int, "4M",                                 \
    "With NCCL_PASS_SM=1, messages of 1..this many bytes go through kernel p2p (lower latency, "  \
    "measured) in communicators of <= 32 ranks; larger ones SM-free. 0: all SM-free.")            \
  X(P2pKernelLanes, "FERRY_P2P_KERNEL_LANES", Int, "0",                                          \
    "Kernel p2p lanes per peer (1, 2, 4, 8, 16; 0: 16 on CUDA, 2 on host / across hosts), fewer when " \
    "2 x ranks x lanes would pass 64 blocks; a message uses one lane per "                        \
    "FERRY_P2P_KERNEL_LANE_BYTES.")                                                               \
  X(P2pKernelLaneBytes, "FERRY_P2P_KERNEL_LANE_BYTES", Int, "16K",                                 \
    "Kernel p2p: a message of B bytes is cut into min(lanes, B / this) parts, one thread block " \
    "each (at least 1K).")                                                                        \
  X(P2pFifoBytes, "FERRY_P2P_FIFO_BYTES", Int, "0",                                                \
    "Kernel p2p: bytes of each peer's FIFO, split among its lanes (a multiple of 16 x "          \
    "FERRY_COLL_SLOTS, 64K..1G); 0: 8M on CUDA, FERRY_COLL_SLOTS x FERRY_COLL_SLOT_BYTES on the " \
    "host runtime.")                                                                              \
  X(P2pKernelLaneSlots, "FERRY_P2P_KERNEL_LANE_SLOTS", Int, "2",                                  \
    "Kernel p2p: FIFO slots per lane (even, 2..64), cut from the lane's 1/lanes share of the "    \
    "peer FIFO; 0: FERRY_COLL_SLOTS.")                                                            \
  X(P2pKernelAcrossHosts, "FERRY_P2P_KERNEL_ACROSS_HOSTS", Int, "-1",                             \
    "1: on a communicator spanning hosts, set up kernel p2p's lanes to the other hosts at init "  \
    "(two network connections per lane and remote peer), so send/recv works inside CUDA-graph "  \
    "capture there; 0: never; -1 (auto): on communicators of at most 8 ranks. NCCL_PASS_SM=0 "   \
    "sets them up regardless.")                                                                   \
  X(P2pLlMaxBytes, "FERRY_P2P_LL_MAX_BYTES", Int, "512K",                                        \
    "Kernel p2p messages of at most this many bytes use the LL protocol (data and flag in one "  \
    "store, half the bandwidth); 0: never.")                                                      \
  X(P2pLlLaneBytes, "FERRY_P2P_LL_LANE_BYTES", Int, "8K",                                         \
    "Kernel p2p LL: a message of B bytes is cut into min(lanes, B / this) parts, one thread "    \
    "block each (1K..1G).")                                                                       \
  X(P2pLlThreshold, "NCCL_P2P_LL_THRESHOLD", Int, "16K",                                          \
    "NCCL's name for FERRY_P2P_LL_MAX_BYTES: sets the limit when set and that is not.")           \
  X(CollChannels, "FERRY_COLL_CHANNELS", Int, "0",                                                 \
    "Ring channels per communicator for collective kernels (one thread block each); 0: 64 on "  \
    "CUDA, 2 on the host runtime; across hosts 8 on CUDA.")                                       \
  X(CollSlots, "FERRY_COLL_SLOTS", Int, "8", "FIFO slots per collective channel (even, 2..64).") \
  X(CollSlotBytes, "FERRY_COLL_SLOT_BYTES", Int, "0",                                              \
    "Bytes per collective FIFO slot (multiple of 16); 0: 256K on CUDA, 64K on the host "         \
    "runtime; across hosts (one network message a slot) 1M and 256K.")                          \
  X(CollLlSlotBytes, "FERRY_COLL_LL_SLOT_BYTES", Int, "0",                                         \
    "Bytes per LL (low-latency protocol) FIFO slot, half of them payload (multiple of 32); 0: "   \
    "32K on CUDA, 4K on the host runtime.")                                                       \
  X(CollLlMaxBytes, "FERRY_COLL_LL_MAX_BYTES", Int, "1M",                                        \
    "Collectives of at most this many bytes (all ranks' data for all-gather/reduce-scatter) use " \
    "the LL protocol (flag in every line, no fences), larger ones the FIFO protocol. 0: never.")  \
  X(CollNetLlMaxBytes, "FERRY_COLL_NET_LL_MAX_BYTES", Int, "0",                                  \
    "On a communicator spanning hosts: collectives of at most this many bytes use the LL "       \
    "protocol there too (the receiving proxy copies its lines word by word); 0: Simple only "     \
    "(faster across hosts at every size on 2x H200, session 30). NCCL_PROTO=LL forces LL.")      \
  X(CollLlChannelBytes, "FERRY_COLL_LL_CHANNEL_BYTES", Int, "4K",                                 \
    "An LL collective takes one channel per this many bytes (at least 1, at most all).")          \
  X(CollNetHopBytes, "FERRY_COLL_NET_HOP_BYTES", Int, "128K",                                     \
    "On a communicator spanning hosts over the built-in sockets (not a net plugin): a FIFO-"      \
    "protocol collective takes as many channels as keep each hop's network message (bytes / "     \
    "(ranks x channels)) at least this large, at most 4 below 64 MiB; 0: one channel per 64 "     \
    "KiB, as on one host.")                                                                       \
  X(RuntimeConnect, "NCCL_RUNTIME_CONNECT", Int, "1",                                             \
    "1: a communicator's collective ring (its FIFOs, most of its memory) is set up by its first " \
    "collective, and kernel p2p's connection to a peer by the first kernel send/recv with it "   \
    "(the peer's proxy answers for it); 0: everything at init.")                                 \
  X(WinCollMinBytes, "FERRY_WIN_COLL_MIN_BYTES", Int, "256M",                                    \
    "Window collectives (FERRY_WIN_COLL_OPS) of >= this many bytes per rank (all-gather) or in "  \
    "all (broadcast) whose output lies in an NCCL_WIN_COLL_SYMMETRIC window run as SM-free "       \
    "copies straight into the peers' windows (one copy per byte, no SM) on one host of separate " \
    "processes; 0: never.")                                                                      \
  X(WinCollOps, "FERRY_WIN_COLL_OPS", String, "broadcast",                                       \
    "Which collectives FERRY_WIN_COLL_MIN_BYTES applies to: a comma list of broadcast and "       \
    "allgather, or none. All-gather is off by default: on 2x H200 its copies were no faster "     \
    "than the ring kernels (bench/RESULTS.md, session 17).")                                     \
  X(CollTimeout, "FERRY_COLL_TIMEOUT", Int, "1800",                                                \
    "Seconds a collective kernel may wait for a peer before it fails the stream (0: no limit).") \
  X(Liveness, "FERRY_LIVENESS", Int, "1",                                                          \
    "1: each communicator's ranks watch each other (a ring of TCP connections with heartbeats), " \
    "so a dead peer fails every survivor's communicator within seconds; 0: off.")                 \
  X(PeerTimeout, "FERRY_PEER_TIMEOUT", Int, "20",                                                  \
    "Seconds a peer may leave its liveness connection silent before it is declared dead (a "      \
    "closed connection counts at once); 0: silence never counts. At least 2 when set.")
// clang-format on
