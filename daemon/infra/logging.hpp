// spdlog setup: the journal when systemd runs us (JOURNAL_STREAM/INVOCATION_ID), stderr otherwise.
#pragma once

namespace vfiod {

// ident names the program in the journal.
void setup_logging(bool verbose, const char* ident = "vfiod");

}  // namespace vfiod
