#include "comm/internal_comm.h"

#include <algorithm>

#include "bootstrap/bootstrap.h"
#include "comm/communicator.h"

namespace ferry {

Status makeInternalComm(Communicator* parent, const std::vector<int>& members, uint32_t tag,
                        const Params& params, bool collectivesOnly, const std::string& what,
                        std::mutex& mu, std::unique_ptr<Communicator>* slot) {
  const int me =
      static_cast<int>(std::find(members.begin(), members.end(), parent->rank()) - members.begin());
  boot::Bootstrap* boot = parent->bootstrap();
  ncclUniqueId id;
  if (me == 0) {
    FERRY_CHECK(boot::createFreshUniqueId(parent->params(), &id));
    for (size_t i = 1; i < members.size(); ++i) {
      FERRY_CHECK(boot->send(members[i], tag, &id, sizeof(id)));
    }
  } else {
    FERRY_CHECK(boot->recv(members[0], tag, &id, sizeof(id)));
  }
  auto c = std::make_unique<Communicator>(params, parent->config(), parent->runtime(),
                                          static_cast<int>(members.size()), me, parent->device());
  if (collectivesOnly) c->setCollectivesOnly();
  c->setPeerFailedHook([parent, members, what](int peer, const std::string& why) {
    const bool known = peer >= 0 && peer < static_cast<int>(members.size());
    parent->peerFailed(known ? members[peer] : -1, "in " + what + ": " + why);
  });
  Communicator* raw = c.get();
  {
    // Published before init, so that abort() can stop it.
    std::lock_guard<std::mutex> lock(mu);
    *slot = std::move(c);
  }
  return raw->runInit({id});
}

}  // namespace ferry
