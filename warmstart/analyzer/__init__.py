"""warmstart.analyzer"""
