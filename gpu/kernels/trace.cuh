// trace_tags.cuh: names for the main steps of a kernel, shared with its Python twin in flashsim/kernels/.
//
// FS_TAG(name) marks the step that follows it; the twin records the same name at the same point.
// For now it compiles to nothing, so tagged kernels are unchanged; the trace issue will give it a body
// (recording the tag, the clock and the warp into a trace buffer).

#pragma once

#define FS_TAG(name)
