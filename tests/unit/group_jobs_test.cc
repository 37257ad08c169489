// Deferred group jobs (comm/group.h): one communicator's jobs run in call
// order (two window registrations of one communicator in one group are two
// collective steps every rank takes in the same order), and different
// communicators' jobs run concurrently (each rank's step waits for its
// peers, which one thread driving several ranks could not satisfy one
// after another). The communicators are only keys here: jobs that carry
// no launches never touch them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"

namespace ferry {
namespace {

Communicator* fakeComm(uintptr_t n) {
  return reinterpret_cast<Communicator*>(n * 64);
}

struct Log {
  std::mutex mu;
  std::vector<std::string> order;
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(what);
  }
};

GroupJob job(Communicator* comm, std::function<Status()> run) {
  GroupJob j;
  j.comm = comm;
  j.blocking = true;
  j.run = std::move(run);
  return j;
}

TEST(GroupJobs, OneCommunicatorInCallOrderSeveralConcurrently) {
  Log log;
  std::atomic<bool> bRan{false};
  bool aSawB = false;
  ASSERT_EQ(groupStart(), ncclSuccess);
  // A's first job waits (bounded) for B's: only concurrency lets it see it.
  ASSERT_EQ(groupSubmit(job(fakeComm(1),
                            [&]() {
                              auto until =
                                  std::chrono::steady_clock::now() + std::chrono::seconds(10);
                              while (!bRan.load() && std::chrono::steady_clock::now() < until) {
                                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                              }
                              aSawB = bRan.load();
                              log.add("A1");
                              return ncclSuccess;
                            })),
            ncclSuccess);
  ASSERT_EQ(groupSubmit(job(fakeComm(1),
                            [&]() {
                              log.add("A2");
                              return ncclSuccess;
                            })),
            ncclSuccess);
  ASSERT_EQ(groupSubmit(job(fakeComm(2),
                            [&]() {
                              log.add("B1");
                              bRan.store(true);
                              return ncclSuccess;
                            })),
            ncclSuccess);
  ASSERT_EQ(groupEnd(), ncclSuccess);
  EXPECT_TRUE(aSawB) << "communicator B's job did not run while A's first job waited";
  std::vector<std::string> a;
  for (const std::string& s : log.order) {
    if (s[0] == 'A') a.push_back(s);
  }
  EXPECT_EQ(a, (std::vector<std::string>{"A1", "A2"}));
}

TEST(GroupJobs, AFailureStillRunsTheRestAndIsReturned) {
  Log log;
  ASSERT_EQ(groupStart(), ncclSuccess);
  ASSERT_EQ(groupSubmit(job(fakeComm(3),
                            [&]() {
                              log.add("first");
                              return ncclInvalidArgument;
                            })),
            ncclSuccess);
  ASSERT_EQ(groupSubmit(job(fakeComm(3),
                            [&]() {
                              log.add("second");  // its peers wait for it
                              return ncclSuccess;
                            })),
            ncclSuccess);
  EXPECT_EQ(groupEnd(), ncclInvalidArgument);
  EXPECT_EQ(log.order, (std::vector<std::string>{"first", "second"}));
}

}  // namespace
}  // namespace ferry
