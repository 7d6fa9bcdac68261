"""warmstart.recorder"""
