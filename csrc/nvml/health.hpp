// The health verdict on a device's state (docs/design.md §9.1): what its readings mean for handing it
// out. Beneath the state read (nvml/read.hpp), which judges each state as it reads it.
#pragma once

#include "nvml/state.hpp"

namespace flinkgpu {

// Sets checks, health, health_text, findings and warnings from state->readings (docs/design.md
// §9.1 has the table); only the findings of `enforced` checks decide health. Unhealthy: lost or
// reset required (always), InfoROM corrupted, row remapping failed, uncorrectable volatile ECC
// errors, a recovery action that needs a reset or reboot (or one this build does not know), NVLink
// fabric registration not started or still in progress. Degraded: row remapping pending, page
// retirement pending, recovery action DRAIN_P2P, fabric registration completed with an error or a
// v3 health summary UNHEALTHY, some but not all NVLinks inactive ("2 of 18 NVLinks inactive"), all of them
// inactive on a GPU of an NVSwitch fabric (a GPU with none active outside one: not applicable, "no active
// NVLink"; without NVLink: not applicable). The nvlink check is judged where the topology was read (a choice
// of two or more, list, doctor): elsewhere it is not supported. RECOVER_IMEX_DOMAIN is no fault of the GPU: a warning
// only.
void judge_health(const CheckSet& enforced, DeviceState* state);

// Adds check `check`'s result, from state->readings, to a state judge_health (and the read) judged already:
// its finding joins the others and can only make the verdict worse, so that what the read decided beyond the
// checks (a MIG GPU without instances is unhealthy) stands. For a reading made after the state read (the
// topology's NVLinks).
void judge_added_check(const CheckSet& enforced, Check check, DeviceState* state);

}  // namespace flinkgpu
