"""What only the book needs: its diagrams (matplotlib, the ``book`` extra) and the Colab cell.

::

    diagrams.py       the book's diagrams, drawn with matplotlib (chapters 01-12)
    colab.py          every chapter's first cell: on Colab, the course at the book's revision
    glue.py           numbers for the prose: MyST-NB's glue in the book build, a no-op elsewhere
    explorer.py       the chapters' explorers: ipywidgets.interact, headless without an Output widget
    studies.py        the stored ablation studies as tables and figures (chapter 09, its appendix)
    toc.py            the table of contents (_toc.yml) in reading order: the PDF and the page tests
"""
