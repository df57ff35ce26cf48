#pragma once
// Fixture for tests/layering: kv/ reaching up into engine/ must be reported.
#include "engine/scheduler.h"
