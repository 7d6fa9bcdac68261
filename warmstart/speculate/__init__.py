"""warmstart.speculate"""
