"""furca's HTTP server: an OpenAI-compatible API and SGLang's native API over an Engine.

    from furca.server import create_app, ServerArgs
    app = create_app(ServerArgs(model=None, api_key="..."))   # or create_app(engine)

Imports the runtime and constrain, never furca.lang.
"""

from furca.server.app import create_app
from furca.server.args import ServerArgs

__all__ = ["ServerArgs", "create_app"]
