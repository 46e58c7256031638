// The subcommands of `tilesmith`, one file each. Each takes the arguments after its name and
// returns the process exit status; errors are thrown and reported by main().
#pragma once

#include <string>
#include <vector>

namespace tilesmith::cli {

int run_devices(const std::vector<std::string>& args);
int run_tune(const std::vector<std::string>& args);
int run_list(const std::vector<std::string>& args);
int run_misses(const std::vector<std::string>& args);
int run_show(const std::vector<std::string>& args);
int run_export(const std::vector<std::string>& args);
int run_source(const std::vector<std::string>& args);
int run_merge(const std::vector<std::string>& args);
int run_status(const std::vector<std::string>& args);
int run_verify(const std::vector<std::string>& args);
int run_plot(const std::vector<std::string>& args);

}  // namespace tilesmith::cli
