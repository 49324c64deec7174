"""The web plan explorer (``paraplan serve``, docs/web.md): a local Starlette application over
``paraplan.api`` whose page runs searches in worker processes and draws their results with Plotly's
bundled JavaScript (nothing fetched at run time). Installed with ``pip install "paraplan[web]"``."""
