"""Resources and the shared substrate (reference §2i, §5): stage → edit → compare → promote, with versions.

The substrate (`/workspace/agent`) is read-only to the file tools; it changes only through
`resources_promote_to_substrate` and `resources_restore_version`, both always_ask and outcome-gated. Drafts live
in the session workspace (`/workspace`). Substrate paths may be given relative to `/workspace/agent`, draft paths
relative to `/workspace`; results name both by their virtual paths.

This module assembles the family's `DEFINITIONS` in publishing order; each declaration lives beside its handler in
`listing`, `staging`, `promotion` or `versions`.
"""

from __future__ import annotations

from managed_tools.tools.framework.definitions.definition import ToolDefinition
from managed_tools.tools.substrate import listing, promotion, staging, versions

DEFINITIONS: tuple[ToolDefinition, ...] = (
    *listing.DEFINITIONS,
    *staging.DEFINITIONS,
    *promotion.DEFINITIONS,
    *versions.DEFINITIONS,
)
