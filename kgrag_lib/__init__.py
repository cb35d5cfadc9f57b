"""kgrag: a runnable reproduction of four knowledge-graph-augmented RAG papers.

Data flows one way: dataset -> (KG, corpus) -> indexes -> method -> predictions + trace
-> scores -> tables/figures. Each arrow is one subpackage of this library.
"""

__version__ = "0.1.0"
