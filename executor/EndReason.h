// Why the executor ended what ran somewhere (a kernel's worker, a session's host) itself.
#ifndef COURIER_EXECUTOR_ENDREASON_H
#define COURIER_EXECUTOR_ENDREASON_H

namespace courier::executor {

/// Why the executor ended a worker itself; a worker that dies on its own has none.
enum class EndReason { None, Deadline, Closed, Shutdown };

} // namespace courier::executor

#endif // COURIER_EXECUTOR_ENDREASON_H
