# The original service's module name: `import Algorithmia; Algorithmia.client()` inside an
# algorithm works unchanged.
from algohost import *  # noqa: F401,F403
from algohost import client, AlgohostError  # noqa: F401
