"""The engine: runs one invocation of a workflow from the top, replaying its journal."""
