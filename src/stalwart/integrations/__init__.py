"""Agent-framework integrations, one module per framework, each its own extra.

Each is a thin consumer of the public API (``stalwart``); what one keeps of its own goes
through the store extension port ``stalwart._extension``, the only internal module the import
contracts let an integration use (docs/extension-port.md).
"""
