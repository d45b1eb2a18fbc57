// spdlog setup: the journal when systemd runs us (JOURNAL_STREAM/INVOCATION_ID), stderr otherwise.
#pragma once

namespace vfiod {

void setup_logging(bool verbose);

}  // namespace vfiod
