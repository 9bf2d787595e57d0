"""Layer ``dynamo``: counters of what ``graphgrad.compile`` did (tests read them).

``counters`` is a ``defaultdict(int)`` (a C-level dict: the cached call path counts
too, and ``collections.Counter``'s item update costs three times as much):

* ``calls``: calls of compiled functions; ``cache_hits``: calls served entirely by
  cached segments; ``frames``: captures run (the first one of a function, one per new
  guard set, one per new branch side or eager-call continuation);
* ``recompiles``: captures of a new root entry after the first (a guard failed);
* ``graphs``: graphs handed to a backend; ``ops``: op nodes in them;
* ``graph_breaks``: graph breaks met while capturing;
* ``eager_fallbacks``: calls run eagerly (unsupported code, recompile limit, Python
  version).
"""

from collections import defaultdict

counters: defaultdict = defaultdict(int)
