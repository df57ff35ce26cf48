// A file the fixture's map names correctly (tests/docs/CMakeLists.txt).
