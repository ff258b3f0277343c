// Converting on a cluster: plan, workers i of n (Slurm job arrays, Kubernetes Indexed Jobs),
// finalize. See convert/cluster/plan_file.hpp for the staging folder and the plan file.
#pragma once

#include "qforge/convert/cluster/finalize.hpp"
#include "qforge/convert/cluster/gguf.hpp"
#include "qforge/convert/cluster/plan_file.hpp"
#include "qforge/convert/cluster/work.hpp"
