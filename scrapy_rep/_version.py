"""scrapy-rep's version, in a room of its own so that any module may name it
without importing the package's face (which names every public class)."""

__version__ = "0.1.0.dev0"
