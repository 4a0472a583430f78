"""patton"""
