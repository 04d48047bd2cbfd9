// roudi.hpp — the iox-roudi daemon the iceoryx baselines need, started by ringbench itself.
#pragma once

namespace ringbench {

// Starts iox-roudi on first use (fork/exec, output to a log file, ready when it prints "RouDi is
// ready for clients") and stops it when ringbench exits (SIGTERM, then SIGKILL after 5 s; the
// daemon also gets SIGTERM through PR_SET_PDEATHSIG if ringbench dies). Throws Skip with the reason
// (binary missing, another RouDi already running ...) when it cannot start; later calls throw the
// same reason without retrying.
void ensure_roudi_running();
void stop_roudi() noexcept;

}  // namespace ringbench
