// Issue 24 rows of bench_local_lifecycle: a sandbox on a cached image next to
// the host-root cold create of the same run, and the disk N sandboxes of one
// image use (layers stored once). See README.md.
#pragma once

#include <string>
#include <vector>

#include "local/lifecycle/provider.h"

namespace deepbox::bench {

struct ImageBenchResult {
  bool ran = false;
  std::string skipped;          // why not ("" when it ran)
  std::vector<double> cold_ms;  // create -> first command, image cached
  std::string density_report;   // the disk rows, ready to print
};

// Pushes an image made of this host's shell and coreutils to a loopback
// docker-registry, pulls it into `provider`'s image cache, then times
// `iterations` (+2 warm-up) cold creates on it -> `true` done, and creates
// `density` sandboxes of it (0: skip) to measure the disk they use.
ImageBenchResult RunImageBench(local::lifecycle::LocalSandboxProvider& provider, int iterations,
                               int density);

}  // namespace deepbox::bench
