"""What only the course needs: synthetic conversations, the example tools (weather, letters, calculator,
search), the ReAct protocol, held-out evals and profiling experiments. The engine never imports this."""
