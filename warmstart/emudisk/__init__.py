"""warmstart.emudisk"""
