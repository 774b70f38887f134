"""furca's data-parallel router: an HTTP front for several furca (or SGLang) servers.

    furca router --worker http://host-a:30000 --worker http://host-b:30000
    furca serve --dp 2            # two replicas on this machine behind a router

It speaks the replicas' API (OpenAI routes, the native /generate, sessions), streams SSE
through, aggregates /health and /metrics, and routes each prompt to the replica most
likely to hold its prefix in its KV cache (`policy.CacheAware`). It imports the server's
protocol only as HTTP, never the runtime: the router process loads no model and no torch.
"""

from furca.router.app import create_router_app
from furca.router.config import RouterConfig

__all__ = ["RouterConfig", "create_router_app"]
