"""The mock's cost model: timing, the tiered cache, the engine, fabric, onboarding and prediction."""
