"""The engines layer: what identifies an engine (``config``), the boundary every backend meets
(``protocol``), how local vLLM engines are placed and run (``placement``, ``local``,
``worker``, ``pool``), served endpoints (``served``), and the hardware and memory they use
(``hardware``, ``memory``). Imports nothing from the layers above."""
