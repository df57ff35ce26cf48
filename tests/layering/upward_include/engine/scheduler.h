#pragma once
// Fixture for tests/layering (the folder kv/cache.h wrongly includes).
