from django.urls import path
from stock import views

urlpatterns = [
    path("buy", views.buy),
    path("stock", views.level),
]
