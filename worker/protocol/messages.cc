#include "worker/protocol/messages.h"

namespace gantry::protocol {

v1::WorkerMessage RegisterMessage(const v1::Resources& resources) {
  v1::WorkerMessage m;
  *m.mutable_register_() = resources;
  return m;
}

v1::WorkerMessage HeartbeatMessage(int64_t time_unix_ms) {
  v1::WorkerMessage m;
  m.mutable_heartbeat()->set_time_unix_ms(time_unix_ms);
  return m;
}

v1::RankProgress* AddRankProgress(v1::Heartbeat* hb, const std::string& job_id, int64_t generation, int rank,
                                  int64_t step) {
  hb->set_job_id(job_id);
  hb->set_generation(generation);
  v1::RankProgress* p = hb->add_ranks();
  p->set_rank(rank);
  p->set_step(step);
  return p;
}

v1::StepReport* SetStepUpdate(const v1::Assignment& a, v1::WorkerMessage* m) {
  auto* u = m->mutable_step();
  u->set_job_id(a.job_id());
  u->set_generation(a.generation());
  u->set_rank(a.rank());
  return u->mutable_report();
}

v1::CheckpointPart* SetCheckpointPart(const v1::Assignment& a, int64_t step, v1::WorkerMessage* m) {
  auto* p = m->mutable_checkpoint_part();
  p->set_job_id(a.job_id());
  p->set_generation(a.generation());
  p->set_rank(a.rank());
  p->set_step(step);
  return p;
}

void AddPlacedFile(v1::CheckpointPart* p, const std::string& name, const std::string& shard_server) {
  auto* f = p->add_files();
  f->set_name(name);
  f->set_shard_server(shard_server);
}

v1::WorkerMessage JobDoneMessage(const v1::Assignment& a, const absl::Status& s) {
  v1::WorkerMessage m;
  auto* d = m.mutable_done();
  d->set_job_id(a.job_id());
  d->set_generation(a.generation());
  d->set_rank(a.rank());
  d->set_ok(s.ok());
  if (!s.ok()) d->set_error(std::string(s.message()));
  d->set_code(static_cast<int>(s.code()));
  return m;
}

}  // namespace gantry::protocol
